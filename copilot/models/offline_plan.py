"""The offline model's planner: a small state machine over the current question's tool calls.

``plan`` is re-run on every model call. It walks the steps the request needs (resolve
the account, read, propose a write, answer) and stops at the first step whose tool
results are not there yet, emitting every missing independent read in one message.
Because each read is identified by its exact arguments, the same read is never made
twice in one question, and after a write's result (or the rep's rejection) it answers.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

from copilot.models import offline_compose as c
from copilot.models.offline_intents import (
    ACTIVITIES,
    CONTACTS,
    DRAFT,
    HELP,
    LOG,
    OPPORTUNITIES,
    OVERVIEW,
    PIPELINE,
    PREFS_SHOW,
    PREFS_UPDATE,
    UPDATE,
    Request,
    log_occurred_at,
)
from copilot.models.offline_state import Call, ToolResult, Turn, as_dict
from copilot.models.offline_text import Period, content_words, quarter_bounds

_MAX_REPROPOSALS = 3
_ACCOUNT_REF_RE = re.compile(r"\[(acc-[A-Za-z0-9-]+)\]")


@dataclass(frozen=True)
class PlannedCall:
    """A tool call the model will make."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """The model's next message: tool calls (``calls``), or the final ``answer``.

    ``answer`` may accompany calls as a short note (e.g. why a write is re-proposed).
    """

    calls: list[PlannedCall] = field(default_factory=list)
    answer: str = ""


class _Emit(Exception):
    """Raised inside the planner to stop at the current step."""

    def __init__(self, step: Step):
        super().__init__("step")
        self.step = step


def _answer(text: str) -> NoReturn:
    raise _Emit(Step(answer=text))


class Planner:
    """Plans the next step for one request given what this question has called so far."""

    def __init__(self, request: Request, turn: Turn, bound: set[str], today: dt.date):
        self.req = request
        self.turn = turn
        self.bound = bound
        self.today = today

    # -- entry point ------------------------------------------------------------------------

    def plan(self) -> Step:
        """The next step: tool calls to make now, or the final answer."""
        try:
            self._plan()
        except _Emit as emitted:
            return emitted.step
        return Step(answer=c.help_text(self.bound))  # pragma: no cover - every path emits

    def _plan(self) -> None:
        intents = self.req.intents
        if intents == [HELP]:
            _answer(c.help_text(self.bound))
        first = intents[0]
        if first == PREFS_SHOW:
            self._preferences_show()
        if first == PREFS_UPDATE:
            self._preferences_update()
        if first == LOG:
            self._log_activity()
        if first == UPDATE:
            self._update_opportunity()
        if first == DRAFT:
            self._draft_followup()
        self._reads()

    # -- primitives -------------------------------------------------------------------------

    def _require(self, tool: str, what: str) -> None:
        if tool not in self.bound:
            _answer(
                f"I can't {what} in this session: the `{tool}` tool isn't available here. "
                "I can still look things up for you."
            )

    def read(self, name: str, args: dict[str, Any]) -> ToolResult:
        """The result of this read, emitting the call if it has not been made yet."""
        self._require(name, f"use `{name}`")
        return self.read_all([(name, args)])[name]

    def read_all(self, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, ToolResult]:
        """Results of independent reads; every missing one is emitted in ONE message."""
        missing: list[PlannedCall] = []
        results: dict[str, ToolResult] = {}
        for name, args in calls:
            if name not in self.bound:
                continue
            done = self.turn.find(name, args)
            if done is None:
                missing.append(PlannedCall(name, args))
            else:
                # A call without a result (history trimmed mid-step) is not retried: that
                # could loop; it reads as "no data right now".
                results[name] = done.result or ToolResult(text="", error_code="unavailable")
        if missing:
            raise _Emit(Step(calls=missing))
        return results

    # -- accounts ---------------------------------------------------------------------------

    def _context_account(self) -> str | None:
        """The account the previous answer was about (for "their contacts", "log a call there")."""
        m = _ACCOUNT_REF_RE.search(self.turn.previous_answer)
        return m.group(1) if m else None

    def resolve_account(self, *, needs_account: bool) -> dict[str, Any]:
        """The account the request names: an id, a search hit, or the previous answer's account."""
        ids = [i for i in self.req.record_ids if i.startswith("acc-")]
        queries = self.req.account_queries
        if not ids and not queries and (needs_account or self.req.refers_back):
            context = self._context_account()
            if context:
                ids = [context]
        if ids:
            if "get_account" in self.bound:
                result = self.read("get_account", {"account_id": ids[0]})
                if not result.ok:
                    _answer(c.error_sentence(result, f"account {ids[0]}"))
                return result.obj
            return {"id": ids[0], "name": ids[0]}
        if not queries:
            _answer('Which account do you mean? Tell me its name (e.g. "summarise Acme").')
        self._require("search_accounts", "look up accounts")
        for query in queries[:3]:
            result = self.read("search_accounts", {"query": query})
            if not result.ok:
                _answer(c.error_sentence(result, f"an account matching '{query}'"))
            if result.items:
                return self._pick_account(query, result.items)
        _answer(f"I found no accounts matching '{queries[0]}' in the CRM.")

    def _pick_account(self, query: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        q = query.lower()
        # One hit, or one exact name, or one name starting with the words asked for.
        names = [(str(i.get("name", "")).lower(), i) for i in items]
        for hits in (
            items,
            [i for n, i in names if n == q],
            [i for n, i in names if n.startswith(q)],
        ):
            if len(hits) == 1:
                return hits[0]
        lines = [
            f"- {i.get('name')} {c.cite(i.get('id'))}" + (f" — {i['city']}" if i.get("city") else "")
            for i in items[:10]
        ]
        _answer(f"Several accounts match '{query}':\n" + "\n".join(lines) + "\nWhich one do you mean?")

    # -- opportunities ----------------------------------------------------------------------

    def _choose_opportunity(
        self, account: dict[str, Any] | None, items: list[dict[str, Any]], *, must_choose: bool
    ) -> dict[str, Any] | None:
        """The open opportunity the request names; asks when it is ambiguous (for updates)."""
        account_words = content_words(str(account.get("name", ""))) if account else set()
        wanted = content_words(self.req.match_text or self.req.text) - account_words
        for q in self.req.account_queries:
            wanted -= content_words(q)
        scored = []
        for opp in items:
            own_account = _account_name(opp)
            words = content_words(str(opp.get("name", ""))) - account_words - content_words(own_account)
            scored.append((len(wanted & words), opp))
        best = max((s for s, _ in scored), default=0)
        top = [o for s, o in scored if s == best and best > 0]
        if len(top) == 1:
            return top[0]
        if best == 0 and len(items) == 1:
            return items[0]
        if not must_choose:
            return None
        candidates = top or items
        where = f" at {account.get('name')} {c.cite(account.get('id'))}" if account else ""
        lines = [c.opportunity_line(o, with_account=account is None) for o in candidates[:10]]
        _answer(f"Which opportunity{where} do you mean?\n" + "\n".join(lines) + "\nTell me its name or id.")

    # -- reads ------------------------------------------------------------------------------

    def _reads(self) -> None:
        intents = self.req.intents
        scoped = bool(self.req.account_queries) or any(i.startswith("acc-") for i in self.req.record_ids)
        # "what did we discuss with them?" continues the previous answer's account.
        follows_up = (
            self.req.refers_back
            and self._context_account() is not None
            and set(intents) <= {OVERVIEW, CONTACTS, ACTIVITIES}
        )
        if scoped or follows_up or OVERVIEW in intents or (CONTACTS in intents and PIPELINE not in intents):
            self._account_reads()
        self._book_reads()

    def _opportunity_filters(self) -> dict[str, Any]:
        args: dict[str, Any] = {}
        period = self.req.period
        if period is not None:
            if period.start is not None:
                args["closing_after"] = period.start.isoformat()
            args["closing_before"] = period.end.isoformat()
        if self.req.stage:
            args["stage"] = self.req.stage
            if self.req.stage.startswith("Closed"):
                args["open_only"] = False
        return args

    def _account_reads(self) -> None:
        intents = self.req.intents
        account = self.resolve_account(needs_account=True)
        acc_id = str(account.get("id"))
        calls: list[tuple[str, dict[str, Any]]] = []
        if OVERVIEW in intents:
            calls.append(("get_account", {"account_id": acc_id}))
        if OVERVIEW in intents or OPPORTUNITIES in intents:
            calls.append(("list_opportunities", {"account_id": acc_id, **self._opportunity_filters()}))
        if ACTIVITIES in intents:
            since = (
                {"since": self.req.period.start.isoformat()}
                if self.req.period and self.req.period.start
                else {}
            )
            calls.append(("list_activities", {"account_id": acc_id, **since, "limit": 10}))
        elif OVERVIEW in intents:
            calls.append(("list_activities", {"account_id": acc_id, "limit": 5}))
        if CONTACTS in intents:
            calls.append(("list_contacts", {"account_id": acc_id}))
        if not any(name in self.bound for name, _ in calls):
            _answer(c.help_text(self.bound))
        results = self.read_all(calls)
        _answer(self._compose_account(account, results))

    def _compose_account(self, account: dict[str, Any], results: dict[str, ToolResult]) -> str:
        failures = [r for r in results.values() if not r.ok]
        if results and len(failures) == len(results):
            return c.error_sentence(failures[0], f"account {account.get('name', '')}".strip())
        detail = results.get("get_account")
        info = detail.obj if detail is not None and detail.ok else account
        opps = results.get("list_opportunities")
        acts = results.get("list_activities")
        contacts = results.get("list_contacts")
        name = str(info.get("name") or account.get("name") or "the account")
        ref = c.cite(info.get("id") or account.get("id"))
        lines = [c.account_header(info)]
        if detail is not None and detail.ok:
            rollup = c.account_rollup(info, c.common_currency(opps.items) if opps else None)
            if rollup:
                lines.append(rollup)
        scope = self._period_phrase()
        lines += c.section(
            "Open opportunities" if not self.req.stage else f"Opportunities in {self.req.stage}",
            opps,
            [c.opportunity_line(o, with_account=False) for o in (opps.items if opps else [])],
            f"No open opportunities{scope} for {name} {ref}.",
            "the opportunities",
        )
        with_notes = ACTIVITIES in self.req.intents
        lines += c.section(
            "Recent activity",
            acts,
            [c.activity_line(a, with_notes=with_notes) for a in (acts.items if acts else [])],
            f"No recorded activities for {name} {ref}.",
            "the activities",
        )
        lines += c.section(
            "Contacts",
            contacts,
            [c.contact_line(x) for x in (contacts.items if contacts else [])],
            f"No contacts recorded for {name} {ref}.",
            "the contacts",
        )
        return "\n".join(line for line in lines).strip()

    def _period_phrase(self) -> str:
        period = self.req.period
        if period is None:
            return ""
        if period.start is None:
            return f" closing by {period.end.isoformat()}"
        return f" closing {period.label} ({period.start.isoformat()} to {period.end.isoformat()})"

    def _book_reads(self) -> None:
        """The rep's own book: deals by period/stage, pipeline summary, recent activity."""
        intents = self.req.intents
        if PIPELINE in intents and self.req.period is None:
            # A pipeline is a period's pipeline: default to this quarter (the CRM's own
            # default), and say so, so the deal list and the totals cover the same window.
            start, end = quarter_bounds(self.today)
            self.req.period = Period(start, end, "this quarter")
        calls: list[tuple[str, dict[str, Any]]] = []
        if PIPELINE in intents or OPPORTUNITIES in intents:
            calls.append(("list_opportunities", {"owner": self.req.owner, **self._opportunity_filters()}))
        if PIPELINE in intents:
            summary: dict[str, Any] = {"scope": "team" if self.req.team else "mine"}
            if self.req.period is not None:
                if self.req.period.start is not None:
                    summary["period_start"] = self.req.period.start.isoformat()
                summary["period_end"] = self.req.period.end.isoformat()
            calls.append(("pipeline_summary", summary))
        if ACTIVITIES in intents:
            since = self.req.period.start if self.req.period and self.req.period.start else None
            calls.append(
                ("list_activities", {**({"since": since.isoformat()} if since else {}), "limit": 10})
            )
        if not calls or not any(name in self.bound for name, _ in calls):
            _answer(c.help_text(self.bound))
        results = self.read_all(calls)
        _answer(self._compose_book(results))

    def _compose_book(self, results: dict[str, ToolResult]) -> str:
        failures = [r for r in results.values() if not r.ok]
        if results and len(failures) == len(results):
            return c.error_sentence(failures[0], "those records")
        lines: list[str] = []
        whose = "Your team has" if self.req.team else ("You have" if self.req.owner == "me" else "I found")
        scope = self._period_phrase()
        stage = f" in {self.req.stage}" if self.req.stage else ""
        opps = results.get("list_opportunities")
        if opps is not None:
            if not opps.ok:
                lines.append(c.error_sentence(opps, "the opportunities"))
            elif not opps.items:
                lines.append(f"{whose} no open opportunities{stage}{scope}.")
            else:
                total_value = opps.obj.get("total")
                total = total_value if isinstance(total_value, int) else len(opps.items)
                lines.append(
                    f"{whose} {c.plural(total, 'open opportunity', 'open opportunities')}{stage}{scope}:"
                )
                lines += [c.opportunity_line(o, with_account=True) for o in opps.items]
                note = c.more_note(opps)
                if note:
                    lines.append(note)
        summary = results.get("pipeline_summary")
        if summary is not None:
            lines.append("")
            lines += _pipeline_lines(summary, "team" if self.req.team else "mine")
        acts = results.get("list_activities")
        if acts is not None:
            lines += c.section(
                "Recent activity",
                acts,
                [c.activity_line(a, with_notes=True) for a in acts.items],
                "No activities found.",
                "the activities",
            )
        return "\n".join(lines).strip()

    # -- preferences ------------------------------------------------------------------------

    def _preferences_show(self) -> None:
        self._require("get_preferences", "read your preferences")
        result = self.read("get_preferences", {})
        if not result.ok:
            _answer(c.error_sentence(result, "your preferences"))
        _answer("Your drafting preferences:\n" + "\n".join(c.preferences_lines(result.data)))

    def _preferences_update(self) -> None:
        spec = self.req.prefs
        if spec is not None and spec.problem:
            _answer(spec.problem)
        self._require("update_preferences", "change your preferences")
        args = dict(spec.args) if spec is not None else {}
        self._after_write("update_preferences")
        raise _Emit(Step(calls=[PlannedCall("update_preferences", args)]))

    # -- writes -----------------------------------------------------------------------------

    def _after_write(self, tool: str) -> None:
        """If this question already proposed ``tool``, answer from its result (never re-propose)."""
        prior = self.turn.all(tool)
        if not prior:
            return
        last = prior[-1]
        result = last.result
        if result is None:
            _answer("Waiting for your decision on the proposed change.")
        if result.rejected:
            _answer(c.rejection_sentence(tool, result.reason))
        if tool == "update_opportunity" and result.conflict:
            self._reproposal(prior)
        if not result.ok:
            _answer(c.error_sentence(result, "that record"))
        _answer(self._confirmation(tool, prior, result))

    def _reproposal(self, prior: list[Call]) -> NoReturn:
        last = prior[-1]
        assert last.result is not None
        data = last.result.obj
        error = as_dict(data.get("error"))
        details = as_dict(error.get("details"))
        current = as_dict(data.get("current")) or as_dict(details.get("current"))
        wanted = {k: v for k, v in last.args.items() if k != "opportunity_id"}
        opp_ref = f"{current.get('name', 'The opportunity')} {c.cite(current.get('id') or last.args.get('opportunity_id'))}"
        now = _describe_changes({k: current.get(k) for k in wanted}) if current else ""
        if current and all(_same(current.get(k), v) for k, v in wanted.items()):
            _answer(
                f"{opp_ref} changed since I read it, and it already has the values you asked for ({now}). Nothing to update."
            )
        if len(prior) >= _MAX_REPROPOSALS:
            _answer(
                f"{opp_ref} keeps changing while we update it (now {now}). Please check the record and ask again."
            )
        note = (
            f"{opp_ref} changed since I read it"
            + (f" (now {now})" if now else "")
            + ", so I'm proposing the same change again for your decision."
        )
        raise _Emit(Step(calls=[PlannedCall("update_opportunity", dict(last.args))], answer=note))

    def _confirmation(self, tool: str, prior: list[Call], result: ToolResult) -> str:
        data = result.obj
        args = prior[-1].args
        if tool == "log_activity":
            act = as_dict(data.get("activity"))
            kind = act.get("type") or args.get("type", "activity")
            subject = act.get("subject") or args.get("subject", "")
            where = _regarding(act) or self._regarding_args(args)
            if data.get("created") is False:
                return f"That {kind} was already logged {c.cite(act.get('id'))} — no duplicate was created."
            return f'Logged the {kind} "{subject}" {c.cite(act.get("id"))}{where}.'.replace("  ", " ")
        if tool == "update_opportunity":
            opp = as_dict(data.get("opportunity"))
            changes = {k: opp.get(k, v) for k, v in args.items() if k != "opportunity_id"}
            name = opp.get("name", "the opportunity")
            text = f"Updated {name} {c.cite(opp.get('id') or args.get('opportunity_id'))}: {_describe_changes(changes)}."
            if len(prior) > 1:
                text += (
                    " (The record had changed after I first read it; this is the change you approved again.)"
                )
            return text
        if tool == "draft_followup_email":
            contact = self._contact_for(args.get("contact_id"))
            who = f" to {contact.get('name')} {c.cite(contact.get('id'))}" if contact else ""
            return f'Saved a draft follow-up email{who} in your Outlook drafts — subject "{args.get("subject", "")}". It has not been sent.'
        if tool == "update_preferences":
            if args.get("reset"):
                return "Reset your drafting preferences to the defaults."
            return "Updated your preferences: " + _describe_changes(args) + "."
        return "Done."

    def _regarding_args(self, args: dict[str, Any]) -> str:
        """ " on Acme Corporation [acc-acme]" from the write's own arguments and earlier reads."""
        acc_id = args.get("account_id")
        if not acc_id:
            return ""
        for name in ("get_account", "search_accounts"):
            for call in self.turn.all(name):
                if call.result is None:
                    continue
                for item in [call.result.obj, *call.result.items]:
                    if item.get("id") == acc_id:
                        return f" on {item.get('name', acc_id)} {c.cite(acc_id)}"
        return f" on account {c.cite(acc_id)}"

    def _contact_for(self, contact_id: object) -> dict[str, Any]:
        for call in self.turn.all("list_contacts"):
            if call.result is not None:
                for item in call.result.items:
                    if item.get("id") == contact_id:
                        return item
        return {}

    def _log_activity(self) -> None:
        self._require("log_activity", "log activities")
        self._after_write("log_activity")
        spec = self.req.log
        assert spec is not None
        opp_ids = [i for i in self.req.record_ids if i.startswith("opp-")]
        account = self.resolve_account(needs_account=True) if not opp_ids else {}
        opportunity_id = opp_ids[0] if opp_ids else None
        if opportunity_id is None and spec.mentions_opportunity and "list_opportunities" in self.bound:
            listed = self.read("list_opportunities", {"account_id": account.get("id")})
            if listed.ok:
                chosen = self._choose_opportunity(account, listed.items, must_choose=False)
                opportunity_id = chosen.get("id") if chosen else None
        name = account.get("name") or opportunity_id or "the account"
        summary = re.split(r",\s|;\s|\.\s|\s(?:and\s+)?next steps?\b", spec.details, maxsplit=1)[0].strip(
            " ."
        )
        preposition = {"email": "to", "task": "for"}.get(spec.type, "with")
        # Lower-case the summary's first letter, but not an acronym's ("CFO is on leave").
        if summary[1:2].islower():
            summary = summary[:1].lower() + summary[1:]
        subject = f"{spec.type.capitalize()} {preposition} {name}" + (f": {summary}" if summary else "")
        args: dict[str, Any] = {"type": spec.type, "subject": subject[:200], "notes": spec.details[:4000]}
        if account.get("id"):
            args["account_id"] = account["id"]
        if opportunity_id:
            args["opportunity_id"] = opportunity_id
        occurred = log_occurred_at(spec.occurred_on, self.today)
        if occurred:
            args["occurred_at"] = occurred
        raise _Emit(Step(calls=[PlannedCall("log_activity", args)]))

    def _update_opportunity(self) -> None:
        self._require("update_opportunity", "update opportunities")
        self._after_write("update_opportunity")
        spec = self.req.update
        assert spec is not None
        opp_ids = [i for i in self.req.record_ids if i.startswith("opp-")]
        if opp_ids:
            opportunity_id = opp_ids[0]
        else:
            has_account = bool(self.req.account_queries) or any(
                i.startswith("acc-") for i in self.req.record_ids
            )
            account: dict[str, Any] | None = None
            if has_account or self._context_account():
                account = self.resolve_account(needs_account=True)
                args: dict[str, Any] = {"account_id": account.get("id")}
            else:
                args = {"owner": "me"}
            self._require("list_opportunities", "find the opportunity")
            listed = self.read("list_opportunities", args)
            if not listed.ok:
                _answer(c.error_sentence(listed, "the opportunities"))
            if not listed.items:
                where = f" for {account.get('name')} {c.cite(account.get('id'))}" if account else ""
                _answer(f"I found no open opportunities{where} to update.")
            chosen = self._choose_opportunity(account, listed.items, must_choose=True)
            assert chosen is not None
            opportunity_id = str(chosen.get("id"))
        raise _Emit(
            Step(
                calls=[PlannedCall("update_opportunity", {"opportunity_id": opportunity_id, **spec.changes})]
            )
        )

    def _draft_followup(self) -> None:
        self._require("draft_followup_email", "draft emails")
        self._after_write("draft_followup_email")
        spec = self.req.draft
        assert spec is not None
        account = self.resolve_account(needs_account=True)
        acc_id = account.get("id")
        self._require("list_contacts", "look up contacts")
        calls: list[tuple[str, dict[str, Any]]] = [("list_contacts", {"account_id": acc_id})]
        if not spec.topic and not self.turn.all("list_activities"):
            calls.append(("list_activities", {"account_id": acc_id, "limit": 1}))
        results = self.read_all(calls)
        contacts = results["list_contacts"]
        if not contacts.ok:
            _answer(c.error_sentence(contacts, "the contacts"))
        if not contacts.items:
            _answer(f"I found no contacts at {account.get('name')} {c.cite(acc_id)} to write to.")
        contact = _match_contact(contacts.items, spec.contact_name, self.req.text)
        if contact is None:
            lines = [c.contact_line(x) for x in contacts.items[:10]]
            _answer(
                f"I found no contact named '{spec.contact_name}' at {account.get('name')} {c.cite(acc_id)}. "
                "Its contacts are:\n" + "\n".join(lines) + "\nWho should I write to?"
            )
        latest = ""
        for call in self.turn.all("list_activities"):
            if call.result is not None and call.result.items:
                latest = str(call.result.items[0].get("subject") or "")
        topic = (
            spec.topic or (latest and f'our recent conversation ("{latest}")') or "our recent conversation"
        )
        subject = (
            f"Follow-up: {spec.topic}"
            if spec.topic
            else (f"Follow-up: {latest}" if latest else f"Following up — {account.get('name')}")
        )
        body = (
            f"Thank you for your time recently. I wanted to follow up on {_with_article(topic)}.\n\n"
            "Please let me know if you have any questions, or if a short call to discuss next steps would help."
        )
        args = {"contact_id": contact.get("id"), "subject": subject[:200], "body": body}
        if acc_id:
            args["account_id"] = acc_id
        raise _Emit(Step(calls=[PlannedCall("draft_followup_email", args)]))


# --- helpers ---------------------------------------------------------------------------------


def _account_name(opp: dict[str, Any]) -> str:
    account = opp.get("account")
    return str(account.get("name", "")) if isinstance(account, dict) else ""


def _regarding(act: dict[str, Any]) -> str:
    parts = []
    for key in ("account", "opportunity"):
        ref = act.get(key)
        if isinstance(ref, dict) and ref.get("id"):
            parts.append(f"{ref.get('name', ref['id'])} {c.cite(ref['id'])}")
    return " on " + " / ".join(parts) if parts else ""


def _same(a: object, b: object) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b)) < 0.005
    return str(a).strip().lower() == str(b).strip().lower()


def _describe_changes(changes: dict[str, Any]) -> str:
    labels = {"close_date": "close date", "next_step": "next step", "email_tone": "email tone"}
    labels |= {"followup_cadence_days": "follow-up cadence (days)"}
    parts = []
    for key, value in changes.items():
        if key in ("opportunity_id", "reset") or value is None:
            continue
        shown = c.money(value) if key == "amount" else value
        parts.append(f"{labels.get(key, key)} → {shown}")
    return ", ".join(parts)


def _with_article(topic: str) -> str:
    lower = topic.lower()
    if lower.startswith(("our ", "the ", "my ", "your ", "a ", "an ")):
        return topic
    return f"our {topic}"


def _match_contact(items: list[dict[str, Any]], name: str | None, text: str) -> dict[str, Any] | None:
    """The named contact (full, first or last name); the first one when no name was given."""
    words = {w.lower() for w in re.findall(r"[A-Za-z][\w'’-]*", name or text)}
    for item in items:
        parts = [p.lower() for p in str(item.get("name", "")).split()]
        if name and " ".join(parts) == name.lower():
            return item
    for item in items:
        name_words = {p.lower() for p in str(item.get("name", "")).split()}
        if name_words & words:
            return item
    return None if name else items[0]


def _pipeline_lines(summary: ToolResult, scope: str) -> list[str]:
    if not summary.ok:
        return [c.error_sentence(summary, "the pipeline summary")]
    data = summary.obj
    period = as_dict(data.get("period"))
    currency = data.get("currency")
    ids = [i for i in data.get("opportunity_ids", []) if isinstance(i, str)]
    span = f"{period.get('start')} to {period.get('end')}" if period else "the period"
    count = data.get("count", len(ids))
    if not count:
        return [f"**Pipeline ({scope}, {span})**: no open opportunities closing in this period."]
    head = (
        f"**Pipeline ({scope}, {span})**: {c.money(data.get('total_amount'), currency)} total, "
        f"{c.money(data.get('weighted_amount'), currency)} weighted, "
        f"{c.plural(int(count), 'open opportunity', 'open opportunities')} {c.cite(*ids)}"
    ).rstrip()
    lines = [head]
    for row in data.get("by_stage", []):
        if isinstance(row, dict) and row.get("count"):
            lines.append(f"- {row.get('stage')}: {row.get('count')} ({c.money(row.get('amount'), currency)})")
    return lines
