"""The offline model understands ordinary phrasing: counts, one field of a deal, contacts by
job title, the latest activity, relative dates, typos, casing and follow-ups.

A small CRM of its own (accounts, deals, contacts, activities) answers like the real one:
searches match names, lists honour their filters, so each answer is checked against what
the records say, never against canned text.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from copilot.proposals import same_value, unchanged_fields, unchanged_result
from copilot.writes import WRITE_TOOL_SCHEMAS
from offline_model import OfflineChatModel
from offline_model.questions import correct_typos, title_score
from offline_model.text import Shift, find_shift

TODAY = dt.date(2026, 5, 6)  # a Wednesday; last week is 2026-04-27 to 2026-05-03

ACCOUNTS = [
    {"id": "acc-kes", "name": "Kestrel Aviation", "industry": "Aerospace", "city": "Denver", "version": 2},
    {"id": "acc-brw", "name": "Brightwater Foods", "industry": "Food", "city": "Austin", "version": 1},
    {"id": "acc-brl", "name": "Brightline Logistics", "industry": "Logistics", "city": "Tulsa", "version": 1},
]


def _deal(
    deal_id: str, account: str, name: str, stage: str, amount: float, close: str, step: str
) -> dict[str, Any]:
    acc = next(a for a in ACCOUNTS if a["id"] == account)
    return {
        "id": deal_id,
        "name": f"{acc['name']} — {name}",
        "account": {"id": account, "name": acc["name"]},
        "stage": stage,
        "amount": amount,
        "currency": "USD",
        "close_date": close,
        "next_step": step,
        "owner": {"id": "u-rep", "name": "Robin Rep"},
        "version": 5,
    }


DEALS = [
    _deal(
        "opp-kes-ren",
        "acc-kes",
        "Renewal",
        "Proposal",
        90000,
        "2026-06-20",
        "Book pricing review with finance",
    ),
    _deal(
        "opp-kes-pil",
        "acc-kes",
        "Hangar Sensors Pilot",
        "Qualification",
        35000,
        "2026-09-15",
        "Send pilot scope",
    ),
    _deal(
        "opp-brw-exp",
        "acc-brw",
        "Cold Chain Expansion",
        "Negotiation",
        410000,
        "2026-05-29",
        "Redline MSA with legal",
    ),
]
CONTACTS = [
    {
        "id": "con-kes-1",
        "name": "Priya Natarajan",
        "title": "Chief Financial Officer",
        "account_id": "acc-kes",
    },
    {"id": "con-kes-2", "name": "Owen Blake", "title": "Head of Procurement", "account_id": "acc-kes"},
    {"id": "con-kes-3", "name": "Lena Ortiz", "title": "IT Director", "account_id": "acc-kes"},
    {"id": "con-kes-4", "name": "Marco Ruiz", "title": "Facilities Manager", "account_id": "acc-kes"},
    {"id": "con-brw-1", "name": "Jonas Weller", "title": "VP Finance", "account_id": "acc-brw"},
    {"id": "con-brw-2", "name": "Jonas Kim", "title": "Purchasing Lead", "account_id": "acc-brw"},
]


def _act(act_id: str, account: str, kind: str, day: str, subject: str) -> dict[str, Any]:
    return {
        "id": act_id,
        "type": kind,
        "subject": subject,
        "notes": "",
        "occurred_at": f"{day}T15:00:00Z",
        "account": {"id": account, "name": next(a["name"] for a in ACCOUNTS if a["id"] == account)},
        "voided": False,
    }


ACTIVITIES = [
    _act("act-kes-1", "acc-kes", "call", "2026-05-04", "Pricing walkthrough"),
    _act("act-kes-2", "acc-kes", "meeting", "2026-04-28", "Hangar site visit"),
    _act("act-kes-3", "acc-kes", "email", "2026-04-10", "Sent case study"),
    _act("act-brw-1", "acc-brw", "email", "2026-05-05", "Redlines sent"),
]


class Crm:
    """Answers the read tools from the records above, honouring their filters."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def answer(self, name: str, args: dict[str, Any]) -> str:
        self.calls.append((name, args))
        return json.dumps(getattr(self, name)(**args))

    @staticmethod
    def _list(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"items": items, "next_cursor": None, "total": len(items)}

    def search_accounts(self, query: str = "", limit: int = 20) -> dict[str, Any]:
        words = query.lower().split()
        return self._list([a for a in ACCOUNTS if all(w in str(a["name"]).lower() for w in words)])

    def get_account(self, account_id: str) -> dict[str, Any]:
        found = next((a for a in ACCOUNTS if a["id"] == account_id), None)
        return found or {"error": {"code": "not_found", "message": "no such account"}}

    def list_opportunities(
        self,
        account_id: str | None = None,
        owner: str = "any",
        stage: str | None = None,
        closing_after: str | None = None,
        closing_before: str | None = None,
        open_only: bool = True,
        limit: int = 20,
    ) -> dict[str, Any]:
        return self._list(
            [
                d
                for d in DEALS
                if (account_id is None or d["account"]["id"] == account_id)
                and (stage is None or d["stage"] == stage)
                and (closing_after is None or d["close_date"] >= closing_after)
                and (closing_before is None or d["close_date"] <= closing_before)
            ]
        )

    def get_opportunity(self, opportunity_id: str) -> dict[str, Any]:
        found = next((d for d in DEALS if d["id"] == opportunity_id), None)
        return found or {"error": {"code": "not_found", "message": "no such opportunity"}}

    def list_activities(
        self,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        since: str | None = None,
        limit: int = 20,
    ) -> dict[str, Any]:
        items = [
            a
            for a in ACTIVITIES
            if (account_id is None or a["account"]["id"] == account_id)
            and (since is None or a["occurred_at"][:10] >= since[:10])
        ]
        return self._list(sorted(items, key=lambda a: a["occurred_at"], reverse=True)[:limit])

    def list_contacts(self, account_id: str, limit: int = 20) -> dict[str, Any]:
        return self._list([c for c in CONTACTS if c["account_id"] == account_id])

    def pipeline_summary(
        self, scope: str = "mine", period_start: str | None = None, period_end: str | None = None
    ) -> dict[str, Any]:
        return {"period": {"start": period_start, "end": period_end}, "count": 0, "by_stage": []}

    def update_opportunity(self, **args: Any) -> dict[str, Any]:
        deal = self.get_opportunity(args["opportunity_id"])
        return {"status": "done", "opportunity": {**deal, **args}}

    def tools(self) -> list[BaseTool]:
        # Only their schemas and annotations matter: the model plans from them, and the test
        # answers each call from this CRM.
        def read(name: str, fn: Callable[..., Any], doc: str) -> BaseTool:
            return StructuredTool.from_function(
                fn, name=name, description=doc, metadata={"readOnlyHint": True}
            )

        def search_accounts(query: str = "", limit: int = 20) -> None: ...
        def get_account(account_id: str) -> None: ...
        def list_opportunities(
            account_id: str | None = None,
            owner: Literal["me", "any"] = "any",
            stage: str | None = None,
            closing_after: str | None = None,
            closing_before: str | None = None,
            open_only: bool = True,
            limit: int = 20,
        ) -> None: ...
        def get_opportunity(opportunity_id: str) -> None: ...
        def list_activities(
            account_id: str | None = None,
            opportunity_id: str | None = None,
            since: str | None = None,
            limit: int = 20,
        ) -> None: ...
        def list_contacts(account_id: str, limit: int = 20) -> None: ...
        def pipeline_summary(
            scope: Literal["mine", "team"] = "mine",
            period_start: str | None = None,
            period_end: str | None = None,
        ) -> None: ...

        reads = [
            read("search_accounts", search_accounts, "Find accounts by name, industry or city."),
            read("get_account", get_account, "One account with counts."),
            read(
                "list_opportunities",
                list_opportunities,
                "Opportunities by account, owner, stage and close date.",
            ),
            read("get_opportunity", get_opportunity, "One opportunity."),
            read("list_activities", list_activities, "Activities, newest first."),
            read("list_contacts", list_contacts, "Contacts of an account."),
            read("pipeline_summary", pipeline_summary, "Open pipeline by stage."),
        ]
        writes = [
            StructuredTool.from_function(
                func=lambda **kw: json.dumps(self.update_opportunity(**kw)),
                name="update_opportunity",
                description="Change an opportunity.",
                args_schema=WRITE_TOOL_SCHEMAS["update_opportunity"],
                metadata={"readOnlyHint": False},
            ),
            StructuredTool.from_function(
                func=lambda **kw: json.dumps({"status": "done", "activity": {"id": "act-1"}}),
                name="log_activity",
                description="Log a call, meeting, email or task.",
                args_schema=WRITE_TOOL_SCHEMAS["log_activity"],
                metadata={"readOnlyHint": False},
            ),
            StructuredTool.from_function(
                func=lambda **kw: json.dumps({"status": "done", "draft": {"id": "d-1"}}),
                name="draft_followup_email",
                description="Save a follow-up email draft.",
                args_schema=WRITE_TOOL_SCHEMAS["draft_followup_email"],
                metadata={"readOnlyHint": False},
            ),
        ]
        return [*reads, *writes]


def _run(
    messages: list[BaseMessage],
    crm: Crm,
    today: dt.date = TODAY,
    *,
    answer_writes: Callable[[dict[str, Any]], str] | None = None,
) -> tuple[list[AIMessage], list[BaseMessage]]:
    bound = OfflineChatModel(today=today).bind_tools(crm.tools())
    produced: list[AIMessage] = []
    for _ in range(8):
        reply = bound.invoke(messages)
        assert isinstance(reply, AIMessage)
        produced.append(reply)
        messages = [*messages, reply]
        if not reply.tool_calls:
            return produced, messages
        for call in reply.tool_calls:
            if call["name"] in WRITE_TOOL_SCHEMAS:
                # The write is where the model stops: the approval step takes over.
                content = (
                    answer_writes(dict(call["args"])) if answer_writes else json.dumps({"status": "done"})
                )
            else:
                content = crm.answer(call["name"], dict(call["args"]))
            messages.append(ToolMessage(content, tool_call_id=str(call["id"]), name=call["name"]))
        if any(c["name"] in WRITE_TOOL_SCHEMAS for c in reply.tool_calls) and answer_writes is None:
            return produced, messages
    raise AssertionError("the model never answered")


def ask(question: str, today: dt.date = TODAY) -> tuple[str, list[AIMessage], Crm]:
    crm = Crm()
    produced, _ = _run([HumanMessage(question)], crm, today)
    return produced[-1].text, produced, crm


def proposed(produced: list[AIMessage]) -> dict[str, Any]:
    [call] = [c for m in produced for c in m.tool_calls if c["name"] == "update_opportunity"]
    return dict(call["args"])


def cited(text: str) -> set[str]:
    return set(re.findall(r"\[([a-z]+-[a-z0-9-]+)\]", text))


# --- counts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "how many open deals does Kestrel have?",
        "number of opportunities at kestrel aviation",
        "How many opps for KESTREL?",
        "kestrel - how many deals are still open",
        "how many oppertunities has kestrel got",
    ],
)
def test_a_rep_who_asks_how_many_deals_an_account_has_gets_the_number_with_each_deal_cited(
    question: str,
) -> None:
    text, _, crm = ask(question)
    assert "Kestrel Aviation [acc-kes] has 2 open opportunities" in text
    assert {"opp-kes-ren", "opp-kes-pil"} <= cited(text)
    assert crm.calls[0][0] == "search_accounts"


def test_a_rep_who_asks_how_many_contacts_gets_the_number() -> None:
    text, _, _ = ask("how many contacts do we have at Kestrel?")
    assert "Kestrel Aviation [acc-kes] has 4 contacts" in text


# --- contacts by job title -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "who"),
    [
        ("who is the CFO at Kestrel?", "Priya Natarajan [con-kes-1]"),
        ("kestrel's head of procurement", "Owen Blake [con-kes-2]"),
        ("Who runs IT at Kestrel Aviation", "Lena Ortiz [con-kes-3]"),
        ("who's the facilities manager at kestrel", "Marco Ruiz [con-kes-4]"),
        ("WHO IS THE CHIEF FINANCIAL OFFICER AT KESTREL", "Priya Natarajan [con-kes-1]"),
        ("who handles purchasing at Brightwater?", "Jonas Kim [con-brw-2]"),
        ("who should I talk to about the budget at brightwater foods", "Jonas Weller [con-brw-1]"),
        ("name of the procurement lead at kestrel?", "Owen Blake [con-kes-2]"),
    ],
)
def test_a_rep_who_asks_for_a_job_title_gets_the_contact_who_holds_it(question: str, who: str) -> None:
    text, _, _ = ask(question)
    assert text.startswith(who), text


def test_a_job_title_nobody_holds_is_said_plainly_with_who_is_there() -> None:
    text, _, _ = ask("who's the head of marketing at Kestrel?")
    assert "None of the contacts at Kestrel Aviation [acc-kes] has a title like 'head marketing'" in text
    assert {"con-kes-1", "con-kes-2", "con-kes-3", "con-kes-4"} <= cited(text)


def test_a_job_title_nobody_holds_exactly_names_the_closest_one_and_says_so() -> None:
    text, _, _ = ask("who is the CTO at Kestrel?")
    assert text == (
        "No contact at Kestrel Aviation [acc-kes] has the title 'CTO'; the closest is Lena Ortiz [con-kes-3], IT Director."
    )


# --- one field of one deal ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "fact"),
    [
        ("what's the next step on the kestrel renewal deal?", "is: Book pricing review with finance."),
        ("Kestrel renewal — next steps?", "is: Book pricing review with finance."),
        ("how much is the kestrel hangar pilot worth?", "is worth USD 35,000."),
        ("what's the amount on the brightwater expansoin", "is worth USD 410,000."),
        ("when is the Brightwater cold chain deal expected to close?", "is expected to close on 2026-05-29."),
        ("close date of the kestrel renwal?", "is expected to close on 2026-06-20."),
        ("what stage is the kestrel pilot in", "is in Qualification stage."),
    ],
)
def test_a_rep_who_asks_one_field_of_a_named_deal_gets_that_value_cited(question: str, fact: str) -> None:
    text, _, crm = ask(question)
    assert fact in text, text
    assert len(cited(text)) == 1
    # The account was searched by its name, not by the whole sentence.
    assert crm.calls[0] == ("search_accounts", {"query": crm.calls[0][1]["query"]})
    assert len(crm.calls[0][1]["query"].split()) <= 2


def test_two_fields_asked_together_are_answered_in_the_order_asked_naming_the_deal_once() -> None:
    text, produced, _ = ask("give me the amount and close date of the brightwater expansion")
    assert text == (
        "Brightwater Foods — Cold Chain Expansion [opp-brw-exp] is worth USD 410,000. "
        "It is expected to close on 2026-05-29."
    )
    assert not any(c["name"] == "update_opportunity" for m in produced for c in m.tool_calls)


def test_a_terse_field_question_after_a_name_is_a_question() -> None:
    text, _, _ = ask("Brightwater Foods: stage?")
    assert text == "Brightwater Foods — Cold Chain Expansion [opp-brw-exp] is in Negotiation stage."


def test_a_field_asked_of_an_account_with_several_deals_lists_each_deal_with_it() -> None:
    text, _, _ = ask("what are the next steps at kestrel?")
    assert "Kestrel Aviation [acc-kes] has 2 open opportunities; the next step of each:" in text
    assert "Book pricing review with finance" in text
    assert "Send pilot scope" in text


def test_how_big_an_accounts_pipeline_is_adds_up_its_deals() -> None:
    text, _, _ = ask("how big is kestrel's pipeline")
    assert "worth USD 125,000 in total" in text


# --- the latest activity and relative periods -----------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "when did we last talk to kestrel?",
        "last touchpoint with Kestrel Aviation",
        "most recent activity at kestrel",
        "when did I last speak with Kestrel",
    ],
)
def test_a_rep_who_asks_for_the_last_activity_gets_the_newest_one(question: str) -> None:
    text, _, _ = ask(question)
    assert text == (
        "The most recent activity with Kestrel Aviation [acc-kes] was a call on 2026-05-04: "
        '"Pricing walkthrough" [act-kes-1].'
    )


def test_a_question_about_one_kind_of_activity_counts_only_that_kind() -> None:
    text, _, _ = ask("any meetings with Kestrel this month?")
    assert (
        text == "No recorded meetings for Kestrel Aviation [acc-kes] this month (2026-05-01 to 2026-05-31)."
    )
    text, _, _ = ask("when was our last meeting with kestrel")
    assert text.startswith(
        "The most recent meeting with Kestrel Aviation [acc-kes] was a meeting on 2026-04-28"
    )


def test_activity_last_week_is_only_the_calendar_week_before_this_one() -> None:
    text, _, crm = ask("kestrel activity last week")
    assert ("list_activities", {"account_id": "acc-kes", "since": "2026-04-27", "limit": 10}) in crm.calls
    assert "last week (2026-04-27 to 2026-05-03)" in text
    assert cited(text) == {"acc-kes", "act-kes-2"}


def test_activity_in_the_last_30_days_counts_what_happened_since() -> None:
    text, _, _ = ask("what happened with kestrel in the last 30 days?")
    assert (
        "3 activities for Kestrel Aviation [acc-kes] in the last 30 days (2026-04-06 to 2026-05-06)" in text
    )


@pytest.mark.parametrize(
    ("question", "after", "before", "deals"),
    [
        ("deals closing next month", "2026-06-01", "2026-06-30", {"opp-kes-ren"}),
        ("anything closing this month?", "2026-05-01", "2026-05-31", {"opp-brw-exp"}),
        (
            "which of my deals close in the next 60 days",
            "2026-05-06",
            "2026-07-05",
            {"opp-kes-ren", "opp-brw-exp"},
        ),
    ],
)
def test_deals_closing_in_a_relative_period_are_read_for_that_window(
    question: str, after: str, before: str, deals: set[str]
) -> None:
    text, _, crm = ask(question)
    name, args = crm.calls[0]
    assert (name, args["closing_after"], args["closing_before"]) == ("list_opportunities", after, before)
    assert deals <= cited(text)
    assert f"You have {len(deals)} open opportunit" in text


def test_deals_closing_by_the_end_of_next_month_end_on_its_last_day() -> None:
    _, _, crm = ask("deals closing by the end of next month")
    assert crm.calls[0][1]["closing_before"] == "2026-06-30"


# --- relative dates in changes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "close_date"),
    [
        ("slip the kestrel renewal two weeks", "2026-07-04"),
        ("push the close date on the kestrel renewal out a month", "2026-07-20"),
        ("push the kestrel renewal back a couple of weeks", "2026-07-04"),
        ("pull the brightwater expansion in by a week", "2026-05-22"),
        ("delay the kestrel pilot by 10 days", "2026-09-25"),
        ("move the kestrel pilot to next Friday", "2026-05-08"),
        ("push the kestrel renewal to the end of next month", "2026-06-30"),
        ("Kestrel renewal close date: in 10 days", "2026-05-16"),
        ("move the brightwater expansion to the start of next quarter", "2026-07-01"),
        ("set the kestrel pilot close date to the 20th", "2026-05-20"),
        ("can you slip the Kestrel renewal by 2 weeks?", "2026-07-04"),
        ("push the kestrel renewal a week later?", "2026-06-27"),
    ],
)
def test_a_relative_close_date_becomes_a_concrete_iso_date(question: str, close_date: str) -> None:
    _, produced, _ = ask(question)
    args = proposed(produced)
    assert args["close_date"] == close_date
    WRITE_TOOL_SCHEMAS["update_opportunity"].model_validate(args)


def test_a_relative_date_is_computed_from_the_injected_today() -> None:
    _, produced, _ = ask("move the kestrel pilot to next Friday", today=dt.date(2026, 5, 11))
    assert proposed(produced)["close_date"] == "2026-05-15"
    _, produced, _ = ask("push the kestrel pilot to in two weeks", today=dt.date(2026, 8, 1))
    assert proposed(produced)["close_date"] == "2026-08-15"


@pytest.mark.parametrize(
    "question",
    [
        "push the kestrel renewal until after their board meets",
        "slip the kestrel renewal a bit",
        "move the close date on the kestrel pilot to sometime later",
    ],
)
def test_a_date_that_cannot_be_read_gets_a_question_back_and_no_proposal(question: str) -> None:
    text, produced, _ = ask(question)
    assert not any(c["name"] == "update_opportunity" for m in produced for c in m.tool_calls)
    assert text.startswith("What date should the close date move to?")


def test_only_the_fields_that_would_change_are_proposed() -> None:
    _, produced, _ = ask("move the kestrel renewal to proposal and push it to next friday")
    assert proposed(produced) == {"opportunity_id": "opp-kes-ren", "close_date": "2026-05-08"}


def test_a_change_the_approval_step_found_already_made_is_said_not_confirmed() -> None:
    crm = Crm()
    deal = crm.get_opportunity("opp-kes-ren")

    def already(args: dict[str, Any]) -> str:
        record = {"target": {"type": "opportunity", "id": deal["id"], "name": deal["name"]}, "current": deal}
        fields = unchanged_fields("update_opportunity", args, record)  # type: ignore[arg-type]
        assert fields is not None
        return json.dumps(unchanged_result("update_opportunity", record, fields))  # type: ignore[arg-type]

    produced, _ = _run([HumanMessage("move the kestrel renewal to proposal")], crm, answer_writes=already)
    assert produced[-1].text == (
        "Kestrel Aviation — Renewal [opp-kes-ren] already has stage Proposal, so there is nothing to change; "
        "I did not propose an update."
    )


# --- names: typos, ambiguity, casing -----------------------------------------------------------------


def test_a_misspelt_account_gets_did_you_mean_from_the_accounts_the_rep_can_see() -> None:
    text, _, _ = ask("summarise kestral")
    assert "Did you mean Kestrel Aviation [acc-kes]?" in text


def test_a_name_two_accounts_share_asks_which_one() -> None:
    text, produced, _ = ask("what's new with bright?")
    assert "Several accounts match 'bright'" in text
    assert {"acc-brw", "acc-brl"} <= cited(text)
    assert not produced[-1].tool_calls


def test_a_first_name_two_contacts_share_asks_which_one() -> None:
    text, produced, _ = ask("draft a follow-up to Jonas at Brightwater about the redlines")
    assert "Several contacts at Brightwater Foods [acc-brw] match 'Jonas'" in text
    assert not any(c["name"] == "draft_followup_email" for m in produced for c in m.tool_calls)


def test_a_misspelt_contact_gets_did_you_mean() -> None:
    text, _, _ = ask("draft a follow-up to Prya at Kestrel about pricing")
    assert text.endswith("Did you mean Priya Natarajan [con-kes-1]?")


def test_a_draft_to_a_job_title_goes_to_the_contact_who_holds_it() -> None:
    _, produced, _ = ask("draft a follow-up to the head of procurement at kestrel about the renewal")
    [call] = [c for m in produced for c in m.tool_calls if c["name"] == "draft_followup_email"]
    assert call["args"]["contact_id"] == "con-kes-2"


# --- follow-ups -------------------------------------------------------------------------------------------


def _conversation(*questions: str) -> list[tuple[str, list[AIMessage]]]:
    crm = Crm()
    messages: list[BaseMessage] = []
    turns: list[tuple[str, list[AIMessage]]] = []
    for question in questions:
        produced, messages = _run([*messages, HumanMessage(question)], crm)
        turns.append((str(produced[-1].text), produced))
    return turns


def test_follow_ups_about_its_fields_stay_on_the_deal_just_discussed() -> None:
    turns = _conversation(
        "how much is the kestrel renewal worth?",
        "and its next step?",
        "when does it close?",
        "slip it a week",
    )
    assert "is worth USD 90,000" in turns[0][0]
    assert (
        turns[1][0]
        == "The next step on Kestrel Aviation — Renewal [opp-kes-ren] is: Book pricing review with finance."
    )
    assert turns[2][0] == "Kestrel Aviation — Renewal [opp-kes-ren] is expected to close on 2026-06-20."
    assert proposed(turns[3][1]) == {"opportunity_id": "opp-kes-ren", "close_date": "2026-06-27"}


def test_a_follow_up_after_an_answer_about_a_contact_stays_on_the_account() -> None:
    turns = _conversation("who is kestrel's CFO?", "when did we last talk to them?")
    assert turns[0][0].startswith("Priya Natarajan [con-kes-1] is the Chief Financial Officer")
    assert "[act-kes-1]" in turns[1][0]


def test_what_about_a_field_after_an_account_summary_gives_it_for_each_deal() -> None:
    turns = _conversation("summarise brightwater", "what about the close date?")
    assert "Brightwater Foods [acc-brw] has 1 open opportunity" not in turns[1][0]
    assert "is expected to close on 2026-05-29" in turns[1][0]


# --- pure parts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "fixed"),
    [
        ("show my oppertunities", "show my opportunities"),
        ("recnt activty on kestrel", "recnt activity on kestrel"),
        ("contcts at brightwater", "contacts at brightwater"),
        ("next step on the renwal", "next step on the renewal"),
        ("send the contract to Kestrel", "send the contract to Kestrel"),
        ("summarise Brightwater", "summarise Brightwater"),
    ],
)
def test_typos_of_the_copilots_vocabulary_are_corrected_and_names_are_not(typed: str, fixed: str) -> None:
    assert correct_typos(typed) == fixed


@pytest.mark.parametrize(
    ("text", "shift"),
    [
        ("slip it two weeks", Shift(2, "week", 1)),
        ("push the close date out a month", Shift(1, "month", 1)),
        ("pull it in by 3 days", Shift(3, "day", -1)),
        ("bump it back a fortnight", Shift(1, "fortnight", 1)),
        ("make it close 2 weeks earlier", Shift(2, "week", -1)),
    ],
)
def test_moves_relative_to_a_records_own_date_are_recognised(text: str, shift: Shift) -> None:
    found = find_shift(text)
    assert found is not None
    assert found.value == shift


@pytest.mark.parametrize(
    "text", ["push it to in two weeks", "close it two weeks from now", "we met two weeks ago"]
)
def test_dates_counted_from_today_are_not_moves(text: str) -> None:
    assert find_shift(text) is None


@pytest.mark.parametrize(
    ("asked", "title", "fits"),
    [
        (["CFO"], "Chief Financial Officer", True),
        (["head", "procurement"], "Purchasing Lead", True),
        (["it"], "IT Director", True),
        (["CFO"], "VP Operations", False),
        (["director"], "IT Director", True),
    ],
)
def test_job_titles_match_by_what_they_mean(asked: list[str], title: str, fits: bool) -> None:
    assert (title_score(asked, title) > 0) is fits


def test_a_proposal_is_a_no_op_only_when_every_proposed_field_already_has_that_value() -> None:
    record: Any = {
        "target": {"type": "opportunity", "id": "opp-1", "name": "Deal"},
        "current": {
            "stage": "Proposal",
            "close_date": "2026-06-20",
            "amount": 90000,
            "next_step": "Call  Finance",
        },
        "error": None,
    }
    assert unchanged_fields(
        "update_opportunity", {"opportunity_id": "opp-1", "stage": "Proposal"}, record
    ) == {"stage": "Proposal"}
    assert unchanged_fields(
        "update_opportunity",
        {"opportunity_id": "opp-1", "amount": 90000.0, "next_step": "call finance"},
        record,
    ) == {"amount": 90000, "next_step": "Call  Finance"}
    assert (
        unchanged_fields("update_opportunity", {"opportunity_id": "opp-1", "stage": "Negotiation"}, record)
        is None
    )
    assert (
        unchanged_fields(
            "update_opportunity",
            {"opportunity_id": "opp-1", "stage": "Proposal", "close_date": "2026-07-01"},
            record,
        )
        is None
    )
    # A record that could not be read, and a write that changes no existing record, are never no-ops.
    assert (
        unchanged_fields(
            "update_opportunity",
            {"opportunity_id": "opp-1", "stage": "Proposal"},
            {**record, "error": {"code": "x"}},
        )
        is None
    )
    assert (
        unchanged_fields("log_activity", {"type": "call", "subject": "x", "account_id": "a"}, record) is None
    )
    assert same_value(dt.date(2026, 6, 20), "2026-06-20")
    assert not same_value(None, "x")


def test_a_question_about_the_reps_own_book_after_an_account_answer_is_about_the_book() -> None:
    turns = _conversation("summarise kestrel", "is it possible to see my pipeline?")
    assert [c["name"] for c in turns[1][1][0].tool_calls] == ["list_opportunities", "pipeline_summary"]
    assert "[opp-brw-exp]" in turns[1][0]


@pytest.mark.parametrize(
    ("question", "contact_id"),
    [
        ("Write Lena Ortiz from Kestrel Aviation a quick follow-up note on the IT rollout", "con-kes-3"),
        ("draft Marco Ruiz at kestrel an email about the hangar lease", "con-kes-4"),
        ("write Owen Blake of Kestrel a thank-you note for the meeting", "con-kes-2"),
    ],
)
def test_a_draft_names_its_addressee_right_after_the_verb(question: str, contact_id: str) -> None:
    _, produced, _ = ask(question)
    [call] = [c for m in produced for c in m.tool_calls if c["name"] == "draft_followup_email"]
    assert call["args"]["contact_id"] == contact_id


@pytest.mark.parametrize(
    "question",
    [
        "add a call to Kestrel about the renewal pricing",
        "Kindly add a meeting with kestrel regarding the pilot",
    ],
)
def test_adding_a_call_or_a_meeting_is_logging_it(question: str) -> None:
    _, produced, _ = ask(question)
    [call] = [c for m in produced for c in m.tool_calls if c["name"] == "log_activity"]
    assert call["args"]["type"] in ("call", "meeting")
    assert call["args"]["account_id"] == "acc-kes"
