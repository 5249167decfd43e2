"""Write requests: find the record, then propose ONE call of the bound write tool for the rep's decision.

A write tool is any bound tool not annotated read-only whose arguments fit the intent
(:mod:`roles`). If none is bound the rep is told plainly; nothing else is tried instead.
"""

from __future__ import annotations

import datetime as dt
import re
from difflib import SequenceMatcher
from typing import Any

from offline_model import compose as c
from offline_model.capture import propose_capture
from offline_model.capture_parse import follow_up_of, named_people
from offline_model.context import PlanContext, ReadCall
from offline_model.focus import fitting_contacts
from offline_model.intents import log_occurred_at
from offline_model.lookup import (
    account_name,
    choose_opportunity,
    context_account,
    context_opportunity,
    continues_previous,
    has_account_reference,
    resolve_account,
)
from offline_model.outcomes import after_write, same
from offline_model.questions import title_spans
from offline_model.roles import WriteRole
from offline_model.steps import PlannedCall, Step, answer


def propose(ctx: PlanContext, role: WriteRole, args: dict[str, Any]) -> Step:
    """One call of the tool serving ``role`` (with only the arguments it takes)."""
    name = ctx.tools.name(role)
    assert name is not None, "callers check the role is served first"
    return Step(calls=[PlannedCall(name, ctx.tools.fit(role, args))])


def _start(ctx: PlanContext, role: WriteRole, what: str) -> Step | None:
    """Stop when no tool serves the write, or when this question already proposed it."""
    return ctx.require(role, what) or after_write(ctx, role)


def propose_preferences(ctx: PlanContext) -> Step:
    """Propose the preference changes the rep asked for."""
    spec = ctx.req.prefs
    if spec is not None and spec.problem:
        return answer(spec.problem)
    stop = _start(ctx, "preferences_update", "change your preferences")
    if stop is not None:
        return stop
    return propose(ctx, "preferences_update", dict(spec.args) if spec is not None else {})


def _opportunity_record(ctx: PlanContext, opportunity_id: str) -> dict[str, Any]:
    for call in ctx.calls("opportunity_detail"):
        if call.result is not None and call.result.obj.get("id") == opportunity_id:
            return call.result.obj
    return {}


def propose_log(ctx: PlanContext) -> Step:
    """Propose logging the activity on the account (and the deal) the rep named."""
    if ctx.req.capture is not None:
        return propose_capture(ctx, ctx.req.capture)
    stop = _start(ctx, "activity_log", "log activities")
    if stop is not None:
        return stop
    spec = ctx.req.log
    assert spec is not None
    opp_ids = ctx.req.ids_of("opportunity")
    opportunity_id = opp_ids[0] if opp_ids else None
    account: dict[str, Any] = {}
    if opportunity_id is None:
        resolved = resolve_account(ctx, needs_account=True)
        if isinstance(resolved, Step):
            return resolved
        account = resolved
        if spec.mentions_opportunity and ctx.tools.has("opportunity_list"):
            listed = ctx.read("opportunity_list", {"account_id": account.get("id")})
            if isinstance(listed, Step):
                return listed
            if listed.ok:
                chosen = choose_opportunity(ctx, account, listed.items, must_choose=False)
                if isinstance(chosen, Step):
                    return chosen
                opportunity_id = chosen.get("id") if chosen else None
    opp = _opportunity_record(ctx, opportunity_id) if opportunity_id and not account else {}
    name = account.get("name") or account_name(opp) or opp.get("name") or opportunity_id or "the account"
    summary = re.split(r",\s|;\s|\.\s|\s(?:and\s+)?next steps?\b", spec.details, maxsplit=1)[0].strip(" .")
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
    occurred = log_occurred_at(spec.occurred_on, ctx.today)
    if occurred:
        args["occurred_at"] = occurred
    if spec.type == "task":
        # "log a task on … due Dec 11 — …": a task's deadline is its due date.
        deadline = follow_up_of(ctx.req.text, ctx.today)
        if deadline is not None:
            args["due_date"] = deadline.due.isoformat()
    account_id = account.get("id") or _account_id(opp)
    record_names = " ".join(str(r.get("name") or "") for r in (account, opp)).lower()
    people = [p for p in named_people(ctx.req.text, ctx.today) if p.lower() not in record_names]
    if people and account_id and ctx.tools.has("contact_list"):
        contacts = ctx.read("contact_list", {"account_id": account_id})
        if isinstance(contacts, Step):
            return contacts
        found = [m[0] for name in people if contacts.ok and len(m := _named(contacts.items, name)) == 1]
        # Names that are no contact of the account (its own name, the deal's) are not people.
        if found:
            args["contact_ids"] = list(dict.fromkeys(str(x.get("id")) for x in found))
    return propose(ctx, "activity_log", args)


def _account_id(opp: dict[str, Any]) -> str | None:
    account = opp.get("account")
    return str(account["id"]) if isinstance(account, dict) and account.get("id") else None


def _named(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The contacts ``name`` names: its full name, else every word of it."""
    full = [x for x in items if str(x.get("name", "")).lower() == name.lower()]
    if full:
        return full
    wanted = {w.lower() for w in name.split()}
    return [x for x in items if wanted <= {p.lower() for p in str(x.get("name", "")).split()}]


UNCLEAR_DATE = (
    'What date should the close date move to? I couldn\'t read a date in "{said}". '
    'You can say, for example, "Dec 15", "next Friday", "end of next month", '
    '"in 10 days" or "two weeks later".'
)


def _changes_for(ctx: PlanContext, opp: dict[str, Any]) -> dict[str, Any] | Step:
    """The fields to propose for this deal: a relative move made concrete from its own close
    date, and only fields it does not already have (all of them when it has every one, so
    the approval step can say it already has them)."""
    spec = ctx.req.update
    assert spec is not None
    changes = dict(spec.changes)
    if spec.shift is not None:
        current = str(opp.get("close_date") or "")
        try:
            base = dt.date.fromisoformat(current[:10])
        except ValueError:
            name = f"{opp.get('name', 'The opportunity')} {c.cite(opp.get('id'))}"
            return answer(
                f"{name} has no close date yet, so I can't move it {spec.shift.describe()}. What date should it close?"
            )
        changes["close_date"] = spec.shift.apply(base).isoformat()
    differing = {k: v for k, v in changes.items() if k not in opp or not same(opp.get(k), v)}
    return differing or changes


def propose_update(ctx: PlanContext) -> Step:
    """Propose exactly the changes the rep asked for, on the opportunity they named."""
    stop = _start(ctx, "opportunity_update", "update opportunities")
    if stop is not None:
        return stop
    spec = ctx.req.update
    assert spec is not None
    if spec.unclear is not None:
        return answer(UNCLEAR_DATE.format(said=c.clean(spec.unclear, 120)))
    opp_ids = ctx.req.ids_of("opportunity")
    if not opp_ids and continues_previous(ctx) and context_opportunity(ctx):
        opp_ids = [str(context_opportunity(ctx))]  # "push it two weeks" after an answer about one deal
    if opp_ids:
        if spec.shift is None or not ctx.tools.has("opportunity_detail"):
            return propose(ctx, "opportunity_update", {"opportunity_id": opp_ids[0], **spec.changes})
        read = ctx.read("opportunity_detail", {"opportunity_id": opp_ids[0]})
        if isinstance(read, Step):
            return read
        if not read.ok:
            return answer(c.error_sentence(read, f"opportunity {opp_ids[0]}"))
        changes = _changes_for(ctx, read.obj)
        if isinstance(changes, Step):
            return changes
        return propose(ctx, "opportunity_update", {"opportunity_id": opp_ids[0], **changes})
    account: dict[str, Any] | None = None
    if has_account_reference(ctx) or context_account(ctx):
        resolved = resolve_account(ctx, needs_account=True)
        if isinstance(resolved, Step):
            return resolved
        account = resolved
        args: dict[str, Any] = {"account_id": account.get("id")}
    else:
        args = {"owner": "me"}
    listed = ctx.read("opportunity_list", args, "find the opportunity")
    if isinstance(listed, Step):
        return listed
    if not listed.ok:
        return answer(c.error_sentence(listed, "the opportunities"))
    if not listed.items:
        where = f" for {account.get('name')} {c.cite(account.get('id'))}" if account else ""
        return answer(f"I found no open opportunities{where} to update.")
    chosen = choose_opportunity(ctx, account, listed.items, must_choose=True)
    if isinstance(chosen, Step):
        return chosen
    assert chosen is not None, "must_choose asks rather than returning nothing"
    changes = _changes_for(ctx, chosen)
    if isinstance(changes, Step):
        return changes
    return propose(ctx, "opportunity_update", {"opportunity_id": str(chosen.get("id")), **changes})


def propose_draft(ctx: PlanContext) -> Step:
    """Propose a follow-up email draft to the contact the rep named (never sent)."""
    stop = _start(ctx, "email_draft", "draft emails")
    if stop is not None:
        return stop
    spec = ctx.req.draft
    assert spec is not None
    account = resolve_account(ctx, needs_account=True)
    if isinstance(account, Step):
        return account
    acc_id = account.get("id")
    missing = ctx.require("contact_list", "look up contacts")
    if missing is not None:
        return missing
    calls: list[ReadCall] = [("contact_list", {"account_id": acc_id})]
    if not spec.topic and not ctx.calls("activity_list"):
        calls.append(("activity_list", {"account_id": acc_id, "limit": 1}))
    results = ctx.read_all(calls)
    if isinstance(results, Step):
        return results
    contacts = results["contact_list"]
    if not contacts.ok:
        return answer(c.error_sentence(contacts, "the contacts"))
    if not contacts.items:
        return answer(f"I found no contacts at {account.get('name')} {c.cite(acc_id)} to write to.")
    contact = pick_contact(contacts.items, spec.contact_name, ctx.req.text)
    if not isinstance(contact, dict):
        where = f"{account.get('name')} {c.cite(acc_id)}"
        if contact:  # several fit the name: ask which
            lines = [c.contact_line(x) for x in contact[:10]]
            return answer(
                f"Several contacts at {where} match '{spec.contact_name}':\n"
                + "\n".join(lines)
                + "\nWhich one should I write to?"
            )
        near = near_contacts(contacts.items, spec.contact_name or "")
        if near:
            options = " or ".join(f"{x.get('name')} {c.cite(x.get('id'))}" for x in near)
            return answer(
                f"I found no contact named '{spec.contact_name}' at {where}. Did you mean {options}?"
            )
        lines = [c.contact_line(x) for x in contacts.items[:10]]
        return answer(
            f"I found no contact named '{spec.contact_name}' at {where}. "
            "Its contacts are:\n" + "\n".join(lines) + "\nWho should I write to?"
        )
    latest = ""
    for call in ctx.calls("activity_list"):
        if call.result is not None and call.result.items:
            latest = str(call.result.items[0].get("subject") or "")
    topic = spec.topic or (latest and f'our recent conversation ("{latest}")') or "our recent conversation"
    subject = (
        f"Follow-up: {spec.topic}"
        if spec.topic
        else (f"Follow-up: {latest}" if latest else f"Following up — {account.get('name')}")
    )
    if spec.points:
        # What the rep asked it to say, in their words, addressed to the contact; the
        # greeting, tone and signature are the rep's preferences (added when saved).
        body = "\n\n".join(spec.points)
    else:
        body = (
            f"Thank you for your time recently. I wanted to follow up on {_with_article(topic)}.\n\n"
            "Please let me know if you have any questions, or if a short call to discuss next steps would help."
        )
    args: dict[str, Any] = {"contact_id": contact.get("id"), "subject": subject[:200], "body": body}
    if acc_id:
        args["account_id"] = acc_id
    return propose(ctx, "email_draft", args)


def _with_article(topic: str) -> str:
    lower = topic.lower()
    if lower.startswith(("our ", "the ", "my ", "your ", "a ", "an ")):
        return topic
    return f"our {topic}"


NAME_NEAR_MISS = 0.75
"""How alike a typed name and a contact's first or last name must be to suggest the contact."""


def pick_contact(
    items: list[dict[str, Any]], name: str | None, text: str
) -> dict[str, Any] | list[dict[str, Any]]:
    """The contact named (full, first or last name), or by job title ("the procurement
    manager"); the first one when nothing names anyone. A list when it is not one contact:
    those that fit the name equally (ask which), or none."""
    if name:
        full = [x for x in items if str(x.get("name", "")).lower() == name.lower()]
        if len(full) == 1:
            return full[0]
        words = {w.lower() for w in re.findall(r"[A-Za-z][\w'’-]*", name)}
        by_word = [x for x in items if {p.lower() for p in str(x.get("name", "")).split()} & words]
        if len(by_word) == 1:
            return by_word[0]
        if by_word:
            return by_word
    titles = [str(s.value) for s in title_spans(text)]
    if titles:
        fitting = fitting_contacts(items, titles)
        if len(fitting) == 1:
            return fitting[0]
        if fitting:
            return fitting
    if name:
        return []
    return items[0]


def near_contacts(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Contacts whose first or last name is close to the one typed ("Mria" → Maria), at most three."""
    typed = [w.lower() for w in re.findall(r"[A-Za-z]{3,}", name)]
    near = [
        x
        for x in items
        if any(
            SequenceMatcher(None, w, part.lower()).ratio() >= NAME_NEAR_MISS
            for w in typed
            for part in str(x.get("name", "")).split()
        )
    ]
    return near if len(near) <= 3 else []
