"""Write tools whose backend is the copilot's own store: approval delegation, its grant and end.

A rep says "let Megan approve my stuff till Friday" or "revoke delegation to Megan" in their own
words; the model proposes one of these, and nothing is granted or ended until the rep approves
its card, like every other change. The colleague is resolved when the proposal is made: a new
delegate against the rep's own directory (:mod:`copilot.people`, with the rep's Graph token), a
revocation against the rep's live grants by name, first name or email. A name that matches
no one, or more than one, is not put to the rep: the call is answered with the question
(:data:`~copilot.writes.types.UNRESOLVED`), so the model asks which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from copilot import delegation
from copilot.errors import AuthError, DirectoryUnavailable, InvalidInput
from copilot.people import find_colleague, people_scopes
from copilot.tools.schemas import DelegateApprovalsArgs, RevokeDelegationArgs
from copilot.writes.crm import now_iso
from copilot.writes.registry import WriteTool, register
from copilot.writes.types import UNRESOLVED, ProposalRecord, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext

DELEGATION_CUES: tuple[str, ...] = (
    "delegat",
    "approve for",
    "approve my",
    "approve on",
    "on my behalf",
    "cover for",
    "revok",
    "take back",
)
"""Word stems of a rep granting or ending an approval delegation."""


def grants_named(grants: Sequence[delegation.Delegation], who: str | None) -> list[delegation.Delegation]:
    """The live grants ``who`` names (pure): all for nobody named; else those whose delegate's
    name is ``who``, or whose name's words start with each of ``who``'s ("Megan", "megan b")."""
    if who is None or not who.strip():
        return list(grants)
    said = who.strip().lower().split()
    found = []
    for grant in grants:
        name = grant.delegate_name.lower().split()
        if name == said or all(any(word.startswith(s) for word in name) for s in said):
            found.append(grant)
    return found


def _record(tool: str, ctx: AgentContext, args: dict[str, Any]) -> ProposalRecord:
    return {
        "tool": tool,
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "version": None,
        "current": {},
        "error": None,
    }


def _unresolved(record: ProposalRecord, message: str) -> ProposalRecord:
    record["target"] = {"type": "colleague", "id": None, "name": ""}
    record["error"] = {"code": UNRESOLVED, "message": message}
    return record


async def _colleague(ctx: AgentContext, who: str) -> delegation.Colleague:
    token = await ctx.tokens.token_for(people_scopes(ctx.settings))
    return await find_colleague(ctx.settings, token, ctx.identity, who)


# --- delegate_approvals ---------------------------------------------------------------------------


async def _snapshot_grant(ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]) -> ProposalRecord:
    record = _record("delegate_approvals", ctx, args)
    try:
        colleague = await _colleague(ctx, str(args.get("colleague") or ""))
    except (InvalidInput, DirectoryUnavailable, AuthError) as exc:
        return _unresolved(record, f"I couldn't tell who you mean: {exc.message}")
    record["target"] = {"type": "colleague", "id": colleague.aad_object_id, "name": colleague.name}
    return record


async def _check_grant(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, DelegateApprovalsArgs)
    target: dict[str, Any] = dict((snapshot or {}).get("target") or {})
    proposed: dict[str, Any] = dict((snapshot or {}).get("proposed") or {})
    if target.get("id") and proposed.get("colleague") == args.colleague:
        colleague = delegation.Colleague(ctx.identity.tenant_id, str(target["id"]), str(target["name"]))
    else:
        # Edited on the card (or never resolved): the directory decides again.
        try:
            colleague = await _colleague(ctx, args.colleague)
        except (InvalidInput, DirectoryUnavailable, AuthError) as exc:
            return WriteOutcome.refused("invalid", f"nothing was changed: {exc.message}")
    return WritePlan(
        tool=plan.tool,
        key=plan.key,
        args=args,
        target={"aad_object_id": colleague.aad_object_id, "name": colleague.name},
    )


async def _grant(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, DelegateApprovalsArgs)
    colleague = delegation.Colleague(
        ctx.identity.tenant_id, str(plan.target["aad_object_id"]), str(plan.target["name"])
    )
    try:
        async with ctx.pool.connection() as conn:
            granted = await delegation.grant(
                conn, ctx.identity, colleague, until=delegation.end_of_day(args.until), now=ctx.clock()
            )
    except InvalidInput as exc:
        return WriteOutcome.refused("invalid", f"nothing was changed: {exc.message}")
    return WriteOutcome.done(
        {"delegate": granted.delegate_name, "until": args.until.isoformat()},
        message=f"{granted.delegate_name} may approve your proposals until {args.until:%a %d %b}",
    )


def _no_target(args: BaseModel) -> str | None:
    return None


DELEGATE_APPROVALS = register(
    WriteTool(
        name="delegate_approvals",
        cues=DELEGATION_CUES,
        title="Delegate my approvals",
        description=(
            "Let a colleague approve or reject the rep's CRM proposals until a day (a vacation, a "
            "leave). The colleague as the rep named them. Needs approval."
        ),
        args_schema=DelegateApprovalsArgs,
        backend="store",
        target_type="colleague",
        target_id=_no_target,
        editable=("colleague", "until"),
        snapshot=_snapshot_grant,
        check=_check_grant,
        execute=_grant,
    )
)


# --- revoke_delegation ----------------------------------------------------------------------------


async def _live(ctx: AgentContext) -> list[delegation.Delegation]:
    async with ctx.pool.connection() as conn:
        return await delegation.granted_by(conn, ctx.identity, now=ctx.clock())


def _which(grants: list[delegation.Delegation], who: str | None) -> list[delegation.Delegation] | str:
    """The grants to end, or the question to ask."""
    live = grants_named(grants, who)
    if not grants:
        return "you have no live approval delegation"
    if not live:
        names = ", ".join(g.delegate_name for g in grants)
        return f"you have no live delegation to {who!r} (yours: {names})"
    if who and len({g.delegate_aad_id for g in live}) > 1:
        names = " or ".join(g.delegate_name for g in live)
        return f"more than one of your delegations is to someone called {who!r}: {names}. Which one?"
    return live


async def _snapshot_revoke(
    ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]
) -> ProposalRecord:
    record = _record("revoke_delegation", ctx, args)
    which = _which(await _live(ctx), args.get("colleague"))
    if isinstance(which, str):
        return _unresolved(record, which)
    record["target"] = {
        "type": "colleague",
        "id": ",".join(g.delegate_aad_id for g in which),
        "name": ", ".join(g.delegate_name for g in which),
    }
    return record


async def _check_revoke(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, RevokeDelegationArgs)
    which = _which(await _live(ctx), args.colleague)
    if isinstance(which, str):
        target: dict[str, Any] = dict((snapshot or {}).get("target") or {})
        proposed: dict[str, Any] = dict((snapshot or {}).get("proposed") or {})
        if target.get("id") and proposed.get("colleague") == args.colleague:
            # The delegation this card named has ended since (another revoke approved at the
            # same moment, or its window closed): what the rep approved holds, so it is done.
            return WritePlan(
                tool=plan.tool, key=plan.key, args=args, target={"ids": [], "names": [str(target["name"])]}
            )
        return WriteOutcome.refused("invalid", f"nothing was changed: {which}")
    return WritePlan(
        tool=plan.tool,
        key=plan.key,
        args=args,
        target={"ids": [g.id for g in which], "names": [g.delegate_name for g in which]},
    )


async def _revoke(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    ended = 0
    async with ctx.pool.connection() as conn:
        for grant_id in plan.target["ids"]:
            ended += await delegation.revoke(conn, ctx.identity, int(grant_id), now=ctx.clock())
    names = ", ".join(plan.target["names"])
    already = "" if ended else " (the delegation had already ended)"
    return WriteOutcome.done(
        {"ended": ended}, message=f"{names} may no longer approve your proposals{already}"
    )


REVOKE_DELEGATION = register(
    WriteTool(
        name="revoke_delegation",
        cues=DELEGATION_CUES,
        title="Revoke a delegation",
        description=(
            "End the rep's approval delegation to a colleague (by full name, first name or email), "
            "or every one. Needs approval."
        ),
        args_schema=RevokeDelegationArgs,
        backend="store",
        target_type="colleague",
        target_id=_no_target,
        editable=("colleague",),
        snapshot=_snapshot_revoke,
        check=_check_revoke,
        execute=_revoke,
    )
)
