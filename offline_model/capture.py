"""Capture from dictation, planned: the records a dictated activity or a reminder names, then
its proposals (the activity, and the follow-up task it promises), each its own approval card.

What the rep said is read by :mod:`offline_model.capture_parse`; this module finds the people
among the rep's contacts (the account named, else every account the rep can see), the deal the
words name, and proposes the writes through the bound activity tool.
"""

from __future__ import annotations

from typing import Any

from offline_model import compose as c
from offline_model.capture_parse import CaptureSpec
from offline_model.context import PlanContext
from offline_model.lookup import choose_opportunity, context_account, names_match, resolve_account
from offline_model.state import Call, as_dict
from offline_model.steps import PlannedCall, Step, answer
from offline_model.text import content_words


def _contact_account(contact: dict[str, Any], listed_for: str | None) -> str | None:
    account = contact.get("account")
    if isinstance(account, dict) and account.get("id"):
        return str(account["id"])
    return str(contact.get("account_id") or listed_for or "") or None


def _match(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The contacts ``name`` names: by full name, else by each of its words (first or last name)."""
    full = [x for x in items if str(x.get("name", "")).lower() == name.lower()]
    if full:
        return full
    wanted = {w.lower() for w in name.split()}
    return [x for x in items if wanted <= {p.lower() for p in str(x.get("name", "")).split()}]


def _find_people(
    ctx: PlanContext, spec: CaptureSpec
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]] | Step:
    """The account, the contacts named (one each) and the names left over (maybe an account's)."""
    account: dict[str, Any] = {}
    names = list(spec.people)
    if spec.account or ctx.req.ids_of("account") or (context_account(ctx) and not names):
        resolved = resolve_account(ctx, needs_account=True)
        if isinstance(resolved, Step):
            return resolved
        account = resolved
    else:
        listed = ctx.read("account_search", {"query": ""}, "look up accounts")
        if isinstance(listed, Step):
            return listed
        if not listed.ok:
            return answer(c.error_sentence(listed, "your accounts"))
        # A name that is an account's ("call with Initech") is the account, not a person.
        for name in list(names):
            hits = [a for a in listed.items if names_match(name, a)]
            if len(hits) == 1 and not account:
                account = hits[0]
                names.remove(name)
        if not account and not names:
            return answer("Which account is this about? Tell me its name.")
    missing = ctx.require("contact_list", "look up contacts")
    if names and missing is not None:
        return missing
    if not names:
        return account, [], []
    everyone: list[tuple[dict[str, Any], str | None]] = []
    if not account.get("id") and _finds_by_name(ctx):
        # The CRM looks people up by name across the rep's accounts: one read per name, not
        # one per account.
        results = ctx.read_each([("contact_list", {"name": name}) for name in names])
        if isinstance(results, Step):
            return results
        for call in ctx.calls("contact_list"):
            if call.result is not None and call.result.ok and call.args.get("name") in names:
                everyone += [(x, _str_or_none(x.get("account_id"))) for x in call.result.items]
    else:
        if account.get("id"):
            scopes = [str(account["id"])]
        else:
            listed = ctx.read("account_search", {"query": ""}, "look up accounts")
            assert not isinstance(listed, Step), "read above"
            scopes = [str(a.get("id")) for a in listed.items if a.get("id")]
        results = ctx.read_each([("contact_list", {"account_id": a}) for a in scopes])
        if isinstance(results, Step):
            return results
        for call in ctx.calls("contact_list"):
            if call.result is not None and call.result.ok and str(call.args.get("account_id")) in scopes:
                everyone += [(x, str(call.args.get("account_id"))) for x in call.result.items]
    chosen: list[dict[str, Any]] = []
    for name in names:
        found = _match([x for x, _ in everyone], name)
        if account.get("id"):
            found = [x for x in found if _contact_account(x, str(account["id"])) == str(account["id"])]
        unique = list({str(x.get("id")): x for x in found}.values())
        if len(unique) > 1:
            lines = [c.contact_line(x) for x in unique[:10]]
            return answer(
                f"Several contacts match '{name}':\n" + "\n".join(lines) + "\nWhich one do you mean?"
            )
        if not unique:
            where = f" at {account.get('name')} {c.cite(account.get('id'))}" if account.get("id") else ""
            return answer(
                f"I found no contact named '{name}'{where} among the contacts you can see. Who is it?"
            )
        chosen.append(unique[0])
    if not account.get("id") and chosen:
        account_id = next(
            (_contact_account(x, s) for x, s in everyone if x.get("id") == chosen[0].get("id")), None
        )
        listed = ctx.read("account_search", {"query": ""}, "look up accounts")
        assert not isinstance(listed, Step), "read above"
        account = next((a for a in listed.items if a.get("id") == account_id), {"id": account_id, "name": ""})
    return account, chosen, []


def _finds_by_name(ctx: PlanContext) -> bool:
    """Whether the bound contact list takes a ``name`` and needs no account (a search by name)."""
    name = ctx.tools.name("contact_list")
    tool = ctx.tools.tools.get(name) if name else None
    return tool is not None and "name" in tool.properties and "account_id" not in tool.required


def _str_or_none(value: Any) -> str | None:
    return str(value) if value else None


def _deal(ctx: PlanContext, account: dict[str, Any], spec: CaptureSpec) -> str | Step | None:
    """The open deal the words name, if they name one (never asked: the card can add it)."""
    if not account.get("id") or not ctx.tools.has("opportunity_list"):
        return None
    listed = ctx.read("opportunity_list", {"account_id": account.get("id")})
    if isinstance(listed, Step):
        return listed
    if not listed.ok or not listed.items:
        return None
    chosen = choose_opportunity(ctx, account, listed.items, must_choose=False)
    if isinstance(chosen, Step):
        return chosen
    # One open deal is not named just by being the only one: the words must name it.
    if chosen is None or not _names_deal(ctx, account, chosen):
        return None
    return str(chosen.get("id"))


def _names_deal(ctx: PlanContext, account: dict[str, Any], deal: dict[str, Any]) -> bool:
    said = content_words(ctx.req.match_text or ctx.req.text)
    return bool(
        said & (content_words(str(deal.get("name", ""))) - content_words(str(account.get("name", ""))))
    )


def _who(contacts: list[dict[str, Any]], account: dict[str, Any]) -> str:
    people = ", ".join(str(x.get("name")) for x in contacts if x.get("name"))
    name = str(account.get("name") or "")
    if people and name:
        return f"{people} ({name})"
    return people or name or "the account"


def capture_calls(ctx: PlanContext, spec: CaptureSpec, tool: str) -> list[PlannedCall] | Step:
    """The proposals: the activity (unless a reminder) and the task it promises, as tool calls."""
    found = _find_people(ctx, spec)
    if isinstance(found, Step):
        return found
    account, contacts, _ = found
    deal = _deal(ctx, account, spec)
    if isinstance(deal, Step):
        return deal
    regarding: dict[str, Any] = {}
    if account.get("id"):
        regarding["account_id"] = account["id"]
    if deal:
        regarding["opportunity_id"] = deal
    contact_ids = [str(x.get("id")) for x in contacts]
    who = _who(contacts, account)
    calls: list[PlannedCall] = []
    if not spec.reminder:
        preposition = "to" if spec.type == "email" else "with"
        subject = f"{spec.type.capitalize()} {preposition} {who}"
        if spec.summary:
            subject += f": {spec.summary}"
        args: dict[str, Any] = {
            "type": spec.type,
            "subject": subject[:200],
            "notes": spec.notes[:4000],
            **regarding,
            "contact_ids": contact_ids,
        }
        if spec.occurred_on is not None:
            args["occurred_at"] = f"{spec.occurred_on.isoformat()}T12:00:00Z"
        calls.append(PlannedCall(tool, args))
    if spec.follow_up is not None:
        what = spec.follow_up.what
        for typed, contact in zip(spec.people, contacts, strict=False):
            # "Call Maria" → "Call Maria Gonzalez": the person as the CRM names them.
            full = str(contact.get("name") or "")
            if full and typed != full and typed in full:
                what = what.replace(typed, full, 1)
        subject = what if spec.reminder else f"Follow up with {who}: {what[:1].lower()}{what[1:]}"
        task: dict[str, Any] = {
            "type": "task",
            "subject": subject[:200],
            "notes": (spec.notes if spec.reminder else f"From the {spec.type}: {spec.notes}")[:4000],
            **regarding,
            "due_date": spec.follow_up.due.isoformat(),
        }
        # A task regards one thing: the deal, else the one person it is about.
        if not deal and len(contact_ids) == 1:
            task["contact_ids"] = contact_ids
        calls.append(PlannedCall(tool, task))
    if not account.get("id") and not deal:
        return answer("Which account is this about? Tell me its name.")
    return calls


def _outcome_line(call: Call) -> str:
    result = call.result
    kind = str(call.args.get("type") or "activity")
    if result is None:
        return f"The {kind} is waiting for your decision."
    if result.rejected:
        return f"You rejected the {kind}; nothing was logged for it."
    if not result.ok:
        return c.error_sentence(result, f"the {kind}")
    act = as_dict(result.obj.get("activity"))
    subject = act.get("subject") or call.args.get("subject", "")
    due = call.args.get("due_date")
    when = f", due {due}" if due else ""
    if result.obj.get("created") is False:
        return f"That {kind} was already logged {c.cite(act.get('id'))}."
    return f'Logged the {kind} "{subject}" {c.cite(act.get("id"))}{when}.'.replace("  ", " ")


def propose_capture(ctx: PlanContext, spec: CaptureSpec) -> Step:
    """The capture's proposals, or, once they were proposed in this question, what became of each."""
    stop = ctx.require("activity_log", "log activities")
    if stop is not None:
        return stop
    name = ctx.tools.name("activity_log")
    assert name is not None
    prior = ctx.turn.all(name)
    if prior:
        return answer("\n".join(_outcome_line(call) for call in prior))
    calls = capture_calls(ctx, spec, name)
    if isinstance(calls, Step):
        return calls
    return Step(calls=[PlannedCall(call.name, ctx.tools.fit("activity_log", call.args)) for call in calls])
