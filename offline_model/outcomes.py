"""After a write was proposed in this question: wait, acknowledge a rejection, re-propose after a
conflict, or confirm what was written. A proposal is never repeated otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from offline_model import compose as c
from offline_model.context import PlanContext
from offline_model.roles import WriteRole
from offline_model.state import Call, ToolResult, as_dict
from offline_model.steps import PlannedCall, Step, answer

MAX_REPROPOSALS = 3


def after_write(ctx: PlanContext, role: WriteRole) -> Step | None:
    """The answer from this question's earlier proposal for ``role``; ``None`` if there was none."""
    prior = ctx.calls(role)
    if not prior:
        return None
    result = prior[-1].result
    if result is None:
        return answer("Waiting for your decision on the proposed change.")
    if result.rejected:
        return answer(c.rejection_sentence(role, result.reason))
    if role == "opportunity_update" and result.conflict:
        return reproposal(ctx, prior)
    if not result.ok:
        return answer(c.error_sentence(result, "that record"))
    if str(result.obj.get("status", "")).lower() == "unchanged":
        return answer(unchanged(ctx, role, result.obj))
    return answer(confirmation(ctx, role, prior, result))


def unchanged(ctx: PlanContext, role: WriteRole, data: dict[str, Any]) -> str:
    """The record already had every value asked for: say so (nothing was proposed or written)."""
    record = as_dict(data.get("record"))
    fields = as_dict(data.get("unchanged"))
    values = ", ".join(
        f"{ctx.tools.label(k)[:1].lower()}{ctx.tools.label(k)[1:]} {c.money(v) if k == 'amount' else v}"
        for k, v in fields.items()
    )
    if role == "preferences_update" or not record.get("id"):
        who = str(record.get("name") or "Your preferences")
        return f"{who} already have {values}; there is nothing to change."
    name = record.get("name") or "The record"
    return (
        f"{name} {c.cite(record.get('id'))} already has {values}, so there is nothing to change; "
        "I did not propose an update."
    )


def reproposal(ctx: PlanContext, prior: list[Call]) -> Step:
    """The same change again after a version conflict (unless it is moot or keeps conflicting)."""
    last = prior[-1]
    data = last.result.obj if last.result is not None else {}
    error = as_dict(data.get("error"))
    details = as_dict(error.get("details"))
    current = as_dict(data.get("current")) or as_dict(details.get("current"))
    wanted = {k: v for k, v in last.args.items() if k != "opportunity_id"}
    opp_ref = f"{current.get('name', 'The opportunity')} {c.cite(current.get('id') or last.args.get('opportunity_id'))}"
    now = describe_changes({k: current.get(k) for k in wanted}, ctx.tools.label) if current else ""
    if current and all(same(current.get(k), v) for k, v in wanted.items()):
        return answer(
            f"{opp_ref} changed since I read it, and it already has the values you asked for ({now}). Nothing to update."
        )
    if len(prior) >= MAX_REPROPOSALS:
        return answer(
            f"{opp_ref} keeps changing while we update it (now {now}). Please check the record and ask again."
        )
    note = (
        f"{opp_ref} changed since I read it"
        + (f" (now {now})" if now else "")
        + ", so I'm proposing the same change again for your decision."
    )
    return Step(calls=[PlannedCall(last.name, dict(last.args))], answer=note)


def confirmation(ctx: PlanContext, role: WriteRole, prior: list[Call], result: ToolResult) -> str:
    """What was written, citing the record the write returned."""
    data = result.obj
    # What was carried out (the rep may have edited the call), else what was asked.
    applied = data.get("applied")
    args = applied if isinstance(applied, dict) else prior[-1].args
    match role:
        case "activity_log":
            act = as_dict(data.get("activity"))
            kind = act.get("type") or args.get("type", "activity")
            subject = act.get("subject") or args.get("subject", "")
            where = regarding(act) or regarding_args(ctx, args)
            if data.get("created") is False:
                return f"That {kind} was already logged {c.cite(act.get('id'))} — no duplicate was created."
            return f'Logged the {kind} "{subject}" {c.cite(act.get("id"))}{where}.'.replace("  ", " ")
        case "opportunity_update":
            opp = as_dict(data.get("opportunity"))
            changes = {k: opp.get(k, v) for k, v in args.items() if k != "opportunity_id"}
            name = opp.get("name", "the opportunity")
            text = f"Updated {name} {c.cite(opp.get('id') or args.get('opportunity_id'))}: {describe_changes(changes, ctx.tools.label)}."
            if len(prior) > 1:
                text += (
                    " (The record had changed after I first read it; this is the change you approved again.)"
                )
            return text
        case "email_draft":
            contact = contact_for(ctx, args.get("contact_id"))
            who = f" to {contact.get('name')} {c.cite(contact.get('id'))}" if contact else ""
            return f'Saved a draft follow-up email{who} in your Outlook drafts — subject "{args.get("subject", "")}". It has not been sent.'
        case "preferences_update":
            if args.get("reset"):
                return "Reset your drafting preferences to the defaults."
            return "Updated your preferences: " + describe_changes(args, ctx.tools.label) + "."
        case "write_undo":
            return undo_confirmation(ctx, data)
        case _:
            assert_never(role)


def undo_confirmation(ctx: PlanContext, data: dict[str, Any]) -> str:
    """What an undo did, from its result (the record as it is now)."""
    if isinstance(data.get("opportunity"), dict):
        opp = as_dict(data.get("opportunity"))
        restored = as_dict(data.get("previous"))
        back = {k: opp.get(k, v) for k, v in restored.items()}
        return (
            f"Undone: {opp.get('name', 'the opportunity')} {c.cite(opp.get('id'))} has its earlier values "
            f"again ({describe_changes(back, ctx.tools.label)})."
        )
    if isinstance(data.get("activity"), dict):
        act = as_dict(data.get("activity"))
        return f'Undone: the activity "{act.get("subject", "")}" {c.cite(act.get("id"))} is now void.'
    return "Undone: the draft was deleted from your Outlook drafts (it had not been sent)."


def regarding(act: dict[str, Any]) -> str:
    """`` on <account> [id] / <opportunity> [id]`` from a logged activity's own links."""
    parts = []
    for key in ("account", "opportunity"):
        ref = act.get(key)
        if isinstance(ref, dict) and ref.get("id"):
            parts.append(f"{ref.get('name', ref['id'])} {c.cite(ref['id'])}")
    return " on " + " / ".join(parts) if parts else ""


def regarding_args(ctx: PlanContext, args: dict[str, Any]) -> str:
    """`` on <account> [id]`` from the write's own arguments and this question's account reads."""
    acc_id = args.get("account_id")
    if not acc_id:
        return ""
    for call in [*ctx.calls("account_detail"), *ctx.calls("account_search")]:
        if call.result is None:
            continue
        for item in [call.result.obj, *call.result.items]:
            if item.get("id") == acc_id:
                return f" on {item.get('name', acc_id)} {c.cite(acc_id)}"
    return f" on account {c.cite(acc_id)}"


def contact_for(ctx: PlanContext, contact_id: object) -> dict[str, Any]:
    """The contact (as this question's contact reads returned it) with this id."""
    for call in ctx.calls("contact_list"):
        if call.result is not None:
            for item in call.result.items:
                if item.get("id") == contact_id:
                    return item
    return {}


def same(a: object, b: object) -> bool:
    """Whether a record's current value already is the one asked for."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b)) < 0.005
    return str(a).strip().lower() == str(b).strip().lower()


def describe_changes(changes: dict[str, Any], label: Callable[[str], str]) -> str:
    """``close date → 2026-12-15, stage → Negotiation``, each field by ``label`` (the bound tools' titles)."""
    parts = []
    for key, value in changes.items():
        if key in ("opportunity_id", "reset") or value is None:
            continue
        shown = c.money(value) if key == "amount" else value
        name = label(key)
        # Inside a sentence: "stage → Proposal, close date → 2026-12-20".
        parts.append(f"{name[:1].lower()}{name[1:]} → {shown}")
    return ", ".join(parts)
