"""The offline model knows tools only from what it is bound to: names, schemas, descriptions, annotations.

A CRM with other tool names and other record ids ("crm_find_accounts", ids like ``k9x2``)
gets the same plans; a tool not annotated read-only is never read from; a write whose
tool is not bound is refused plainly; and the package's source names no sandbox tool,
record id prefix or record.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from offline_model import OfflineChatModel

ROOT = Path(__file__).resolve().parents[2]
TODAY = dt.date(2026, 5, 6)
READ = {"readOnlyHint": True}

# Deliberately unlike the sandbox's ids: nothing about their shape says "record id".
ACCOUNT = {"id": "k9x2", "name": "Vandelay Industries", "industry": "Import/Export", "city": "Springfield"}
DEAL = {
    "id": "d77q",
    "name": "Vandelay Industries — Renewal",
    "account": {"id": "k9x2", "name": "Vandelay Industries"},
    "stage": "Proposal",
    "amount": 50000,
    "currency": "USD",
    "close_date": "2026-09-30",
}
PERSON = {"id": "p31z", "name": "Dana Reyes", "title": "Buyer", "account_id": "k9x2"}
EVENT = {"id": "e500", "type": "call", "subject": "Pricing check-in", "occurred_at": "2026-05-01T10:00:00Z"}


class LogArgs(BaseModel):
    """Record a call, meeting, email or task."""

    type: Literal["call", "meeting", "email", "task"]
    subject: str
    notes: str = ""
    account_id: str | None = None
    opportunity_id: str | None = None


class DealChangeArgs(BaseModel):
    """Change a deal."""

    opportunity_id: str
    stage: str | None = None
    close_date: str | None = None
    amount: float | None = None
    next_step: str | None = None


class DraftArgs(BaseModel):
    """Save an email draft."""

    contact_id: str
    subject: str
    body: str = Field(min_length=1)


class RenamedCrm:
    """A CRM whose tools have other names (and whose feed takes no ``limit``), answering canned data."""

    def __init__(self, *, unmarked: tuple[str, ...] = (), read_only: tuple[str, ...] = ()) -> None:
        self.unmarked = unmarked
        self.read_only = read_only
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.missing: set[str] = set()

    def answer(self, name: str, args: dict[str, Any]) -> str:
        self.calls.append((name, args))
        if name == "crm_find_accounts":
            hit = "vandelay" in str(args.get("query", "")).lower()
            return json.dumps({"items": [ACCOUNT] if hit else []})
        if name == "crm_deal" and args.get("opportunity_id") in self.missing:
            return json.dumps({"error": {"code": "not_found", "message": "no such deal"}})
        answers: dict[str, Any] = {
            "crm_account": {**ACCOUNT, "open_opportunities": 1},
            "crm_deals": {"items": [DEAL]},
            "crm_deal": {**DEAL, "id": args.get("opportunity_id")},
            "crm_activity_feed": {"items": [EVENT]},
            "crm_people": {"items": [PERSON]},
            "crm_pipeline": {"period": {"start": "2026-04-01", "end": "2026-06-30"}, "count": 0},
            "crm_log_activity": {"status": "done", "activity": {"id": "e900", "type": "call"}},
            "crm_change_deal": {"status": "done", "opportunity": {**DEAL, "stage": "Negotiation"}},
            "crm_draft_email": {"status": "done", "draft": {"id": "m1"}},
        }
        return json.dumps(answers[name])

    def tools(self, names: tuple[str, ...] | None = None) -> list[BaseTool]:
        def crm_find_accounts(query: str = "") -> str:
            """Search companies by name."""
            return ""

        def crm_account(account_id: str) -> str:
            """One account with its counts."""
            return ""

        def crm_deals(
            account_id: str | None = None,
            owner: Literal["me", "any"] = "any",
            stage: str | None = None,
            closing_after: str | None = None,
            closing_before: str | None = None,
        ) -> str:
            """Opportunities by account, owner, stage and close date."""
            return ""

        def crm_deal(opportunity_id: str) -> str:
            """One opportunity."""
            return ""

        def crm_activity_feed(account_id: str | None = None, since: str | None = None) -> str:
            """Activities on an account, newest first."""
            return ""

        def crm_people(account_id: str) -> str:
            """The contacts of an account."""
            return ""

        def crm_pipeline(period_start: str | None = None, period_end: str | None = None) -> str:
            """Open pipeline totals for a period."""
            return ""

        reads: list[Callable[..., str]] = [
            crm_find_accounts,
            crm_account,
            crm_deals,
            crm_deal,
            crm_activity_feed,
            crm_people,
            crm_pipeline,
        ]
        built: list[BaseTool] = [
            StructuredTool.from_function(f, metadata=self._metadata(f.__name__, read=True)) for f in reads
        ]
        for name, schema, description in (
            ("crm_log_activity", LogArgs, "Log an activity on an account or deal. Needs approval."),
            ("crm_change_deal", DealChangeArgs, "Change a deal's stage or close date. Needs approval."),
            ("crm_draft_email", DraftArgs, "Save a follow-up email draft. Never sends."),
        ):
            built.append(
                StructuredTool.from_function(
                    func=self._writer(name),
                    name=name,
                    description=description,
                    args_schema=schema,
                    metadata=self._metadata(name, read=False),
                )
            )
        return [t for t in built if names is None or t.name in names]

    def _metadata(self, name: str, *, read: bool) -> dict[str, Any] | None:
        if name in self.unmarked:
            return None  # no annotation at all: the model must take it for a write
        if name in self.read_only:
            return dict(READ)
        return dict(READ) if read else {"readOnlyHint": False, "title": name.replace("_", " ")}

    def _writer(self, name: str) -> Callable[..., str]:
        def write(**kwargs: Any) -> str:
            return self.answer(name, kwargs)

        return write


def _ask(
    question: str | list[BaseMessage], crm: RenamedCrm, *, tools: tuple[str, ...] | None = None
) -> tuple[list[AIMessage], list[BaseMessage]]:
    bound = OfflineChatModel(today=TODAY).bind_tools(crm.tools(tools))
    messages: list[BaseMessage] = [HumanMessage(question)] if isinstance(question, str) else list(question)
    produced: list[AIMessage] = []
    for _ in range(8):
        reply = bound.invoke(messages)
        assert isinstance(reply, AIMessage)
        produced.append(reply)
        messages.append(reply)
        if not reply.tool_calls:
            return produced, messages
        for call in reply.tool_calls:
            content = crm.answer(call["name"], call["args"])
            messages.append(ToolMessage(content, tool_call_id=str(call["id"]), name=call["name"]))
    raise AssertionError("the model never answered")


def _calls(message: AIMessage) -> list[tuple[str, dict[str, Any]]]:
    return [(c["name"], c["args"]) for c in message.tool_calls]


# --- (a) renamed tools get the same plans -------------------------------------------------------


def test_an_overview_searches_then_reads_detail_deals_and_activity_by_their_own_names() -> None:
    produced, _ = _ask("summarise Vandelay", RenamedCrm())
    assert _calls(produced[0]) == [("crm_find_accounts", {"query": "Vandelay"})]
    # One message with every read; the feed takes no ``limit``, so none is sent.
    assert _calls(produced[1]) == [
        ("crm_account", {"account_id": "k9x2"}),
        ("crm_deals", {"account_id": "k9x2"}),
        ("crm_activity_feed", {"account_id": "k9x2"}),
    ]
    answer = produced[-1].text
    assert "Vandelay Industries [k9x2]" in answer
    assert "[d77q]" in answer
    assert "[e500]" in answer


def test_my_deals_and_pipeline_use_the_renamed_list_and_summary() -> None:
    produced, _ = _ask("what's in my pipeline this quarter?", RenamedCrm())
    assert _calls(produced[0]) == [
        ("crm_deals", {"owner": "me", "closing_after": "2026-04-01", "closing_before": "2026-06-30"}),
        ("crm_pipeline", {"period_start": "2026-04-01", "period_end": "2026-06-30"}),
    ]


def test_log_a_call_proposes_the_renamed_log_tool_found_by_its_arguments() -> None:
    produced, _ = _ask("log a call with Vandelay — discussed pricing", RenamedCrm())
    assert _calls(produced[0]) == [("crm_find_accounts", {"query": "Vandelay"})]
    assert _calls(produced[1]) == [
        (
            "crm_log_activity",
            {
                "type": "call",
                "subject": "Call with Vandelay Industries: discussed pricing",
                "notes": "Discussed pricing",
                "account_id": "k9x2",
            },
        )
    ]
    assert produced[-1].text.startswith("Logged the call")
    assert "[e900]" in produced[-1].text


def test_an_opportunity_update_finds_the_deal_then_proposes_the_renamed_change_tool() -> None:
    produced, _ = _ask("push the Vandelay renewal to Dec 15 and move it to negotiation", RenamedCrm())
    assert _calls(produced[1]) == [("crm_deals", {"account_id": "k9x2"})]
    assert _calls(produced[2]) == [
        ("crm_change_deal", {"opportunity_id": "d77q", "stage": "Negotiation", "close_date": "2026-12-15"})
    ]
    assert "Updated Vandelay Industries — Renewal [d77q]" in produced[-1].text


def test_a_draft_reads_the_renamed_contacts_and_proposes_the_renamed_draft_tool() -> None:
    produced, _ = _ask("draft a follow-up to Dana at Vandelay about pricing", RenamedCrm())
    assert _calls(produced[1]) == [("crm_people", {"account_id": "k9x2"})]
    [(name, args)] = _calls(produced[2])
    assert name == "crm_draft_email"
    assert args["contact_id"] == "p31z"
    assert args["subject"] == "Follow-up: pricing"
    assert "not been sent" in produced[-1].text


def test_an_id_an_earlier_result_returned_is_recognised_whatever_its_shape() -> None:
    crm = RenamedCrm()
    _, messages = _ask("summarise Vandelay", crm)
    produced, _ = _ask([*messages, HumanMessage("push d77q to Dec 15")], crm)
    # ``d77q`` came back from the deals read, so it is that opportunity: no lookup needed.
    assert _calls(produced[0]) == [
        ("crm_change_deal", {"opportunity_id": "d77q", "close_date": "2026-12-15"})
    ]


def test_a_typed_word_that_may_be_an_unseen_id_is_read_before_it_is_used() -> None:
    produced, _ = _ask("change next step on deal-0042 to send contract", RenamedCrm())
    assert _calls(produced[0]) == [("crm_deal", {"opportunity_id": "deal-0042"})]
    assert _calls(produced[1]) == [
        ("crm_change_deal", {"opportunity_id": "deal-0042", "next_step": "Send contract"})
    ]


def test_a_typed_word_no_read_finds_is_taken_as_a_word_again() -> None:
    crm = RenamedCrm()
    crm.missing.add("deal-0042")
    produced, _ = _ask("change next step on deal-0042 to send contract", crm)
    assert _calls(produced[0]) == [("crm_deal", {"opportunity_id": "deal-0042"})]
    assert _calls(produced[1]) == [("crm_find_accounts", {"query": "deal-0042"})]
    assert not produced[-1].tool_calls
    assert "found no account matching 'deal-0042'" in produced[-1].text


# --- (b) a tool without readOnlyHint: True is a write -------------------------------------------


def test_an_unannotated_search_tool_is_never_called_for_a_read() -> None:
    crm = RenamedCrm(unmarked=("crm_find_accounts",))
    produced, _ = _ask("summarise Vandelay", crm)
    assert crm.calls == []
    assert len(produced) == 1
    assert "can't look up accounts in this session" in produced[0].text


def test_an_unannotated_feed_is_not_read_even_when_the_question_asks_for_activity() -> None:
    crm = RenamedCrm(unmarked=("crm_activity_feed",))
    produced, _ = _ask("recent activity on Vandelay", crm)
    assert "crm_activity_feed" not in [name for name, _ in crm.calls]
    assert not produced[-1].tool_calls


def test_an_unannotated_tool_with_a_log_schema_is_proposed_only_for_a_log_request() -> None:
    crm = RenamedCrm(unmarked=("crm_log_activity",))
    produced, _ = _ask("summarise Vandelay", crm)
    assert "crm_log_activity" not in [name for m in produced for name, _ in _calls(m)]
    produced, _ = _ask("log a call with Vandelay — discussed pricing", crm)
    assert [name for name, _ in _calls(produced[1])] == ["crm_log_activity"]


def test_a_read_only_tool_is_never_proposed_as_a_write() -> None:
    crm = RenamedCrm(read_only=("crm_log_activity",))
    produced, _ = _ask("log a call with Vandelay — discussed pricing", crm)
    assert [name for m in produced for name, _ in _calls(m)] == []
    assert "can't log activities in this session" in produced[-1].text


# --- (c) a write whose tool is not bound is refused plainly -------------------------------------

READS_ONLY = ("crm_find_accounts", "crm_account", "crm_deals", "crm_deal", "crm_activity_feed", "crm_people")


@pytest.mark.parametrize(
    ("question", "refusal"),
    [
        ("log a call with Vandelay — discussed pricing", "can't log activities in this session"),
        ("push the Vandelay renewal to Dec 15", "can't update opportunities in this session"),
        ("draft a follow-up to Dana at Vandelay about pricing", "can't draft emails in this session"),
        ("set my email tone to formal", "can't change your preferences in this session"),
    ],
)
def test_a_write_without_a_bound_tool_for_it_says_it_cannot(question: str, refusal: str) -> None:
    crm = RenamedCrm()
    produced, _ = _ask(question, crm, tools=READS_ONLY)
    assert len(produced) == 1
    assert not produced[0].tool_calls
    assert refusal in produced[0].text
    assert crm.calls == []


# --- (d) nothing of the sandbox in the package's source -----------------------------------------


def _sandbox_tool_names() -> set[str]:
    """Every tool the sandbox's MCP server defines (functions decorated ``@mcp.tool``)."""
    tree = ast.parse((ROOT / "sandbox" / "mcp_server.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "tool":
                    names.add(node.name)
    return names


def _package_sources() -> dict[str, str]:
    package = ROOT / "offline_model"
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(package.rglob("*.py"))}


def test_the_offline_package_names_no_sandbox_or_copilot_tool() -> None:
    sandbox_tools = _sandbox_tool_names()
    assert {"search_accounts", "list_opportunities", "get_opportunity", "upsert_activity"} <= sandbox_tools
    # The copilot's own tools too: the model must find them from what it is bound to.
    names = sandbox_tools | {
        "log_activity",
        "update_opportunity",
        "draft_followup_email",
        "update_preferences",
        "get_preferences",
        "undo_write",
        "recent_writes",
        "search_knowledge",
        "deals_at_risk",
        "catch_up",
    }
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names))) + r")\b")
    sources = _package_sources()
    assert len(sources) >= 8
    found = {
        path: sorted(set(pattern.findall(text))) for path, text in sources.items() if pattern.search(text)
    }
    assert found == {}


def test_the_offline_package_has_no_record_id_prefixes_or_sandbox_records() -> None:
    pattern = re.compile(r"\b(?:acc|opp|con|act)-|\b(?:Acme|Globex)\b", re.IGNORECASE)
    found = {
        path: sorted(set(m.group(0) for m in pattern.finditer(text)))
        for path, text in _package_sources().items()
        if pattern.search(text)
    }
    assert found == {}
