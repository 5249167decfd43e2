"""What changed since the rep last looked: a catch-up over one deal, one account or the rep's
whole book, composed from the rep's own CRM reads with no model call, every item cited.

* field changes (old → new, who, when) and stage movements, from the CRM's change history
  (:meth:`copilot.crm.reads.CrmReads.history`) of each open deal in scope, and deals created
  since;
* deals won or lost in the window (:meth:`copilot.crm.reads.CrmReads.closed_opportunities`: the
  rep's own for their book, the account's, or the one deal asked about even if closed): the close
  as a stage movement into :data:`~copilot.vocabulary.WON_STAGE` / :data:`~copilot.vocabulary.LOST_STAGE`
  with who and when from the deal's change history (with the rest of its changes since), or, where
  the CRM keeps no history of it, from the deal's ``closed_at``; a deal closed before the window
  is not listed, whatever changed on it since;
* new activities regarding the deal, or the account(s) and their deals, that happened since;
* new contacts of the deal's account, the account, or the accounts of the rep's open deals,
  added since (the contact's ``created_at``, :meth:`copilot.crm.reads.CrmReads.contacts`).

A CRM whose contact reads do not say when a contact was added gets the honest note
(:data:`CONTACTS_SKIPPED`) instead of a guess. A deal whose history the CRM keeps none of (or
refuses) is counted and named in ``skipped``.

"Since" defaults to the rep's last catch-up of their whole book (stored per rep in PostgreSQL,
:func:`last_catch_up`), else 7 days before now; a whole-book catch-up moves the stored moment
forward to its ``now`` (never back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from psycopg import AsyncConnection
from pydantic import BaseModel, ConfigDict, Field

from copilot.auth.tokens import TokenBroker
from copilot.cited_text import CitationCheck, amount_text, check_citations, plain, with_citations
from copilot.crm import connector
from copilot.crm.reads import Record
from copilot.evidence import Evidence
from copilot.identity import RepIdentity
from copilot.insight.risk import history_of
from copilot.settings import Settings
from copilot.vocabulary import CLOSED_STAGES

DEFAULT_DAYS = 7
MAX_DEALS = 200
MAX_ITEMS = 100
ItemKind = Literal["stage", "field", "new_deal", "activity", "new_contact"]
ITEM_TITLES: dict[ItemKind, str] = {
    "stage": "Stage movements",
    "field": "Field changes",
    "new_deal": "New deals",
    "activity": "New activities",
    "new_contact": "New contacts",
}
FIELD_LABELS = {"close_date": "close date", "next_step": "next step", "amount": "amount"}
CONTACTS_SKIPPED = "New contacts are not listed: the CRM does not say when a contact was added."


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CatchUpItem(_Frozen):
    """One thing that changed: its text (with its ``[id]`` citations), the ids, when and who."""

    kind: ItemKind
    text: str
    cited: tuple[str, ...] = Field(min_length=1)
    at: datetime
    by: str = ""
    field: str = ""
    """The changed field (``stage`` for a stage movement), for a field change."""


class CatchUp(_Frozen):
    """What changed in scope between ``since`` and ``until``, newest first."""

    scope: str
    since: datetime
    until: datetime
    since_source: Literal["asked", "last_catch_up", "default"]
    deals: int
    items: tuple[CatchUpItem, ...]
    skipped: tuple[str, ...] = ()
    text: str = ""
    citation_check: CitationCheck | None = None

    @property
    def cited(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i for item in self.items for i in item.cited))


# --- pure ---------------------------------------------------------------------------------------


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _value(field: str, value: Any, deal: Mapping[str, Any]) -> str:
    if value is None or value == "":
        return "(none)"
    if field == "amount" and isinstance(value, int | float):
        return amount_text({**deal, "amount": value})
    return plain(value)[:10] if field == "close_date" else plain(value)


def history_items(
    deal: Mapping[str, Any], history: Sequence[Mapping[str, Any]], since: datetime
) -> list[CatchUpItem]:
    """The deal's stage movements, field changes and (if new) its creation since ``since``."""
    deal_id, name = str(deal["id"]), plain(deal.get("name"))
    items: list[CatchUpItem] = []
    for version in history:
        at = _instant(version.get("at"))
        if at is None or at < since:
            continue
        by_record = version.get("by")
        by = plain(by_record.get("name")) if isinstance(by_record, Mapping) else ""
        who = f" by {by}" if by else ""
        when = f"{at:%Y-%m-%d %H:%M} UTC"
        if version.get("operation") == "create":
            text, cites = with_citations(f"{name} created{who}, {when}", deal_id)
            items.append(CatchUpItem(kind="new_deal", text=text, cited=cites, at=at, by=by))
            continue
        for change in version.get("changes") or []:
            if not isinstance(change, Mapping):
                continue
            field = str(change.get("field") or "")
            old, new = _value(field, change.get("old"), deal), _value(field, change.get("new"), deal)
            label = FIELD_LABELS.get(field, field.replace("_", " "))
            kind: ItemKind = "stage" if field == "stage" else "field"
            text, cites = with_citations(f"{name}: {label} {old} → {new}{who}, {when}", deal_id)
            items.append(CatchUpItem(kind=kind, text=text, cited=cites, at=at, by=by, field=field))
    return items


def is_closed(deal: Mapping[str, Any]) -> bool:
    """Whether the deal is won or lost (its stage, in the copilot's words on every CRM)."""
    return plain(deal.get("stage")) in CLOSED_STAGES


def _closed_in(value: Any, since: datetime, until: datetime) -> datetime | None:
    """A deal's ``closed_at`` if it falls in the window (a bare date: if its day does), else None."""
    moment = _instant(value)
    if moment is None:
        return None
    if len(str(value)) == 10:  # the CRM keeps the day only
        return moment if since.date() <= moment.date() <= until.date() else None
    return moment if since <= moment <= until else None


def closed_items(
    deal: Mapping[str, Any], history: Sequence[Mapping[str, Any]] | None, since: datetime, until: datetime
) -> list[CatchUpItem]:
    """A deal won or lost between ``since`` and ``until``: its changes since (the close among them,
    a stage movement with who and when), or, without a close in its history, the close from its
    ``closed_at``; nothing when it closed outside the window."""
    stage = plain(deal.get("stage"))
    closes = [
        at
        for version in history or []
        for change in version.get("changes") or []
        if isinstance(change, Mapping)
        and change.get("field") == "stage"
        and change.get("new") == stage
        and (at := _instant(version.get("at"))) is not None
    ]
    if closes:
        return history_items(deal, history or [], since) if since <= closes[-1] <= until else []
    at = _closed_in(deal.get("closed_at"), since, until)
    if at is None:
        return []
    when = f"{at:%Y-%m-%d}" if len(str(deal.get("closed_at"))) == 10 else f"{at:%Y-%m-%d %H:%M} UTC"
    text, cites = with_citations(f"{plain(deal.get('name'))}: closed as {stage}, {when}", str(deal["id"]))
    items = [i for i in history_items(deal, history or [], since) if i.kind != "new_deal"]
    return [*items, CatchUpItem(kind="stage", text=text, cited=cites, at=at, field="stage")]


def activity_item(activity: Mapping[str, Any], names: Mapping[str, str]) -> CatchUpItem | None:
    """A new activity as an item (None without an id or a moment)."""
    at = _instant(activity.get("occurred_at"))
    if at is None or not activity.get("id"):
        return None
    owner = activity.get("owner")
    by = plain(owner.get("name")) if isinstance(owner, Mapping) else ""
    about = activity.get("opportunity") or activity.get("account")
    about_id = str(about.get("id")) if isinstance(about, Mapping) and about.get("id") else ""
    about_id = about_id or str(activity.get("regarding_id") or "")
    regarding = f" on {names[about_id]}" if about_id in names else ""
    kind = plain(activity.get("type")) or "activity"
    text = f"New {kind}: {plain(activity.get('subject')) or '(no subject)'}{regarding}"
    text += f"{f' by {by}' if by else ''}, {at:%Y-%m-%d %H:%M} UTC"
    cited, cites = with_citations(text, str(activity["id"]), about_id if about_id in names else "")
    return CatchUpItem(kind="activity", text=cited, cited=cites, at=at, by=by)


def contact_item(contact: Mapping[str, Any], names: Mapping[str, str]) -> CatchUpItem | None:
    """A contact as a new-contact item, cited by its id and its account's (None without an id
    or a created time)."""
    at = _instant(contact.get("created_at"))
    if at is None or not contact.get("id"):
        return None
    account = contact.get("account")
    account_id = str(contact.get("account_id") or "")
    if not account_id and isinstance(account, Mapping):
        account_id = str(account.get("id") or "")
    title = plain(contact.get("title"))
    name = plain(contact.get("name")) or "(no name)"
    at_account = f" at {names[account_id]}" if account_id in names else ""
    text = f"New contact: {name}{f', {title}' if title else ''}{at_account}, added {at:%Y-%m-%d %H:%M} UTC"
    cited, cites = with_citations(text, str(contact["id"]), account_id)
    return CatchUpItem(kind="new_contact", text=cited, cited=cites, at=at)


def render(catch_up: CatchUp) -> str:
    """The catch-up as text: the window, each kind's items (newest first), what was skipped."""
    lines = [
        f"What changed {('in ' + catch_up.scope) if catch_up.scope else ''} since "
        f"{catch_up.since:%Y-%m-%d %H:%M} UTC ({catch_up.deals} open deal{'s' if catch_up.deals != 1 else ''}):"
    ]
    if not catch_up.items:
        lines.append("Nothing changed.")
    for kind, title in ITEM_TITLES.items():
        facts = [i.text for i in catch_up.items if i.kind == kind]
        if facts:
            lines.append(f"{title}:")
            lines.extend(f"  - {fact}" for fact in facts)
    lines.extend(f"({note})" for note in catch_up.skipped)
    return "\n".join(lines)


def default_window() -> timedelta:
    """How far back a first catch-up looks."""
    return timedelta(days=DEFAULT_DAYS)


# --- the stored last catch-up -------------------------------------------------------------------


async def last_catch_up(conn: AsyncConnection[Any], identity: RepIdentity) -> datetime | None:
    """When the rep last caught up on their whole book (None: never)."""
    cursor = await conn.execute(
        "SELECT caught_up_at FROM catchup_marks WHERE tenant_id = %s AND rep_aad_id = %s",
        (identity.tenant_id, identity.aad_object_id),
    )
    row = await cursor.fetchone()
    if row is None:
        return None
    value = row["caught_up_at"] if isinstance(row, Mapping) else row[0]
    assert isinstance(value, datetime)
    return value


async def mark_caught_up(conn: AsyncConnection[Any], identity: RepIdentity, at: datetime) -> None:
    """Store ``at`` as the rep's last catch-up (an earlier moment never replaces a later one)."""
    await conn.execute(
        "INSERT INTO catchup_marks (tenant_id, rep_aad_id, caught_up_at) VALUES (%s, %s, %s)"
        " ON CONFLICT (tenant_id, rep_aad_id) DO UPDATE"
        " SET caught_up_at = GREATEST(catchup_marks.caught_up_at, excluded.caught_up_at)",
        (identity.tenant_id, identity.aad_object_id, at),
    )


# --- reading (as the rep) -----------------------------------------------------------------------


def _accounts_of(deals: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The deals' accounts, id → name ('' when the deal does not name it), in order."""
    found: dict[str, str] = {}
    for deal in deals:
        account = deal.get("account")
        if isinstance(account, Mapping) and account.get("id"):
            found.setdefault(str(account["id"]), plain(account.get("name")))
    return found


async def catch_up_reads(
    evidence: Evidence,
    since: datetime,
    until: datetime,
    *,
    account_id: str | None = None,
    opportunity_id: str | None = None,
) -> tuple[str, int, list[CatchUpItem], list[str]]:
    """(scope, deals looked at, items, skipped notes) of one catch-up, read as the rep."""
    account_names: dict[str, str] = {}
    closed: list[Record] = []
    if opportunity_id is not None:
        deal = await evidence.record_of("opportunity", opportunity_id)
        deals, scope = [deal], plain(deal.get("name"))
        activities = await evidence.activities(opportunity_id=opportunity_id, since=since, limit=MAX_ITEMS)
        account_names = _accounts_of(deals)
        if is_closed(deal):
            deals, closed = [], [deal]
    elif account_id is not None:
        account = await evidence.account(account_id)
        deals, scope = await evidence.open_opportunities(account_id=account_id), plain(account.get("name"))
        closed = await evidence.closed_opportunities(since=since, account_id=account_id)
        activities = await evidence.activities(account_id=account_id, since=since, limit=MAX_ITEMS)
        account_names = {account_id: plain(account.get("name"))}
    else:
        deals, scope = await evidence.open_opportunities(mine=True), "your book"
        closed = await evidence.closed_opportunities(since=since, mine=True)
        activities = []
        account_names = _accounts_of(deals)
        for one in account_names:
            activities += await evidence.activities(account_id=one, since=since, limit=MAX_ITEMS)
    contacts: list[Mapping[str, Any]] = []
    for one in account_names:
        contacts += await evidence.contacts(one)
    deals = deals[:MAX_DEALS]
    names = {str(d["id"]): plain(d.get("name")) for d in deals}
    items: list[CatchUpItem] = []
    without = 0
    for deal in deals:
        history = await history_of(evidence, str(deal["id"]))
        if history is None:
            without += 1
            continue
        items += history_items(deal, history, since)
    # Deals won or lost in the window (a CRM may return some closed before it: left out here).
    looked = len(deals)
    for won_or_lost in [d for d in closed if str(d.get("id") or "") not in names][:MAX_DEALS]:
        history = await history_of(evidence, str(won_or_lost["id"]))
        found = closed_items(won_or_lost, history, since, until)
        looked += bool(found)
        without += bool(found) and history is None
        items += found
    seen: set[str] = set()
    for activity in activities:
        item = activity_item(activity, names)
        if item is not None and since <= item.at <= until and item.cited[0] not in seen:
            seen.add(item.cited[0])
            items.append(item)
    for contact in contacts:
        item = contact_item(contact, {k: v for k, v in account_names.items() if v})
        if item is not None and since <= item.at <= until and item.cited[0] not in seen:
            seen.add(item.cited[0])
            items.append(item)
    items.sort(key=lambda i: (i.at, i.text), reverse=True)
    # The honest note stays only when the CRM did not say when a contact it listed was added.
    skipped = [CONTACTS_SKIPPED] if any(_instant(c.get("created_at")) is None for c in contacts) else []
    if without:
        skipped.insert(
            0,
            f"The CRM gave no change history for {without} of {looked} deals: their field changes are not listed.",
        )
    return scope, len(deals), items[:MAX_ITEMS], skipped


async def catch_up_from(
    evidence: Evidence,
    conn: AsyncConnection[Any],
    identity: RepIdentity,
    *,
    now: datetime,
    since: datetime | None = None,
    account_id: str | None = None,
    opportunity_id: str | None = None,
) -> CatchUp:
    """The rep's catch-up as of ``now``, read through ``evidence`` (the rep's own reads):
    ``since`` else their last catch-up else :func:`default_window` ago; a whole-book one stores
    ``now`` as their last catch-up once it is read."""
    source: Literal["asked", "last_catch_up", "default"] = "asked"
    if since is None:
        stored = await last_catch_up(conn, identity)
        since, source = (stored, "last_catch_up") if stored is not None else (None, "default")
        since = since or now - default_window()
    scope, deals, items, skipped = await catch_up_reads(
        evidence, since, now, account_id=account_id, opportunity_id=opportunity_id
    )
    result = CatchUp(
        scope=scope,
        since=since,
        until=now,
        since_source=source,
        deals=deals,
        items=tuple(items),
        skipped=tuple(skipped),
    )
    text = render(result)
    if account_id is None and opportunity_id is None:
        await mark_caught_up(conn, identity, now)
    return result.model_copy(
        update={"text": text, "citation_check": check_citations(text, evidence.messages)}
    )


async def catch_up_at(
    settings: Settings,
    identity: RepIdentity,
    tokens: TokenBroker,
    conn: AsyncConnection[Any],
    *,
    now: datetime,
    since: datetime | None = None,
    account_id: str | None = None,
    opportunity_id: str | None = None,
) -> CatchUp:
    """The rep's catch-up as of ``now``, read with ``tokens`` in a session of its own
    (:func:`catch_up_from`)."""
    async with AsyncExitStack() as stack:
        evidence = Evidence(connector.reads(stack, settings, tokens))
        return await catch_up_from(
            evidence,
            conn,
            identity,
            now=now,
            since=since,
            account_id=account_id,
            opportunity_id=opportunity_id,
        )
