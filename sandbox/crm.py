"""The sandbox CRM's service API: every read and write, with permissions enforced.

The MCP layer (``sandbox.mcp_server``) maps one tool onto one method. Methods are
synchronous (the MCP layer runs them in a worker thread), take the authenticated
caller first and raise ``CrmError`` with a stable code. The data set is small, so
visibility is decided row by row in Python with ``sandbox.permissions`` instead
of being re-encoded in SQL: one place for the rules.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from sandbox import db
from sandbox import permissions as perms
from sandbox.directory import User, find_user, reports_of
from sandbox.errors import CrmError

STAGES: tuple[str, ...] = (
    "Prospecting",
    "Qualification",
    "Proposal",
    "Negotiation",
    "Closed Won",
    "Closed Lost",
)
OPEN_STAGES: tuple[str, ...] = STAGES[:4]
CLOSED_STAGES: tuple[str, ...] = STAGES[4:]
CLOSED_PROBABILITY = {"Closed Won": 100, "Closed Lost": 0}
ACTIVITY_TYPES: tuple[str, ...] = ("call", "meeting", "email", "task")
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_NEXT_STEP = 500
MAX_SUBJECT = 200
MAX_NOTES = 4000
MAX_ACTIVITY_CONTACTS = 20
PARTY_TYPE = {"call": 2, "email": 2, "meeting": 5}
"""How a named contact takes part, as Dataverse's ``participationtypemask``: a call's or email's
To (2), a meeting's required attendee (5)."""
PARTY_REGARDING = 8
"""A task has no participants: the contact it names is what it regards (mask 8, Regarding)."""
TASK_NOT_STARTED = 2
"""A task's open ``statuscode`` (Not Started)."""
MAX_REASON = 500
MAX_IDEMPOTENCY_KEY = 200

Row = Mapping[str, Any]


def stages() -> list[str]:
    """All opportunity stages in pipeline order (the first four are open)."""
    return list(STAGES)


# --- argument parsing -----------------------------------------------------------------


def _invalid(message: str, **details: Any) -> CrmError:
    return CrmError("validation", message, details)


def _page(items: list[dict[str, Any]], limit: int, cursor: str | None) -> dict[str, Any]:
    offset = _parse_cursor(cursor)
    _check_limit(limit)
    end = offset + limit
    return {
        "items": items[offset:end],
        "next_cursor": str(end) if end < len(items) else None,
        "total": len(items),
    }


def _check_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise _invalid(f"limit must be an integer between 1 and {MAX_LIMIT}", field="limit")


def _parse_cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not isinstance(cursor, str) or not cursor.isdigit():
        raise _invalid("cursor is not one this server issued", field="cursor")
    return int(cursor)


def _parse_date(value: object, field: str) -> date:
    if isinstance(value, str) and len(value) == 10:
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise _invalid(f"{field} must be an ISO date (YYYY-MM-DD)", field=field, value=value)


def _parse_instant(value: object, field: str) -> str:
    """An ISO date or datetime as the store's UTC timestamp string (naive = UTC)."""
    if isinstance(value, str):
        if len(value) == 10:
            return f"{_parse_date(value, field).isoformat()}T00:00:00Z"
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            moment = None
        if moment is not None:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise _invalid(f"{field} must be an ISO 8601 date or datetime", field=field, value=value)


def _text(value: object, field: str, max_len: int, *, required: bool) -> str:
    if not isinstance(value, str):
        raise _invalid(f"{field} must be a string", field=field)
    value = value.strip()
    if required and not value:
        raise _invalid(f"{field} must not be empty", field=field)
    if len(value) > max_len:
        raise _invalid(f"{field} must be at most {max_len} characters", field=field)
    return value


def _number(value: object, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(f"{field} must be a number", field=field, value=value)
    if not low <= value <= high:
        raise _invalid(f"{field} must be between {low:g} and {high:g}", field=field, value=value)
    return float(value)


def _current_quarter(today: date) -> tuple[date, date]:
    first_month = 3 * ((today.month - 1) // 3) + 1
    start = date(today.year, first_month, 1)
    next_start = date(today.year + (first_month == 10), 1 if first_month == 10 else first_month + 3, 1)
    return start, next_start - timedelta(days=1)


# --- views ----------------------------------------------------------------------------


def _user_name(user_id: str) -> str:
    user = find_user(user_id)
    return user.name if user else user_id


def _person(user_id: str | None) -> dict[str, Any] | None:
    return None if user_id is None else {"id": user_id, "name": _user_name(user_id)}


def _tenant_of(row: Row | None) -> str | None:
    return None if row is None else str(row["tenant_id"])


def _ref(record_id: str | None, names: Mapping[str, str]) -> dict[str, Any] | None:
    if record_id is None:
        return None
    return {"id": record_id, "name": names.get(record_id, record_id)}


@dataclass
class _Scope:
    """What one caller can see in their tenant, loaded once per call."""

    caller: User
    accounts: dict[str, Row]
    opportunities: dict[str, Row]
    shares: dict[tuple[str, str], set[str]]
    contacts: dict[str, Row] = field(default_factory=dict)
    parties: dict[str, list[str]] = field(default_factory=dict)
    """Each activity's contacts (activity parties), in the order they were named."""
    due: dict[str, str] = field(default_factory=dict)
    """Each task's due date (ISO date), where it has one."""

    def contact_readable(self, contact_id: str) -> bool:
        row = self.contacts.get(contact_id)
        return row is not None and self.account_readable(row["account_id"])

    def account_readable(self, account_id: str | None) -> bool:
        row = self.accounts.get(account_id or "")
        return row is not None and perms.can_read_account(
            self.caller, row, self.shares.get(("account", row["id"]), set())
        )

    def opportunity_readable(self, opportunity_id: str | None) -> bool:
        row = self.opportunities.get(opportunity_id or "")
        return row is not None and perms.can_read_opportunity(
            self.caller,
            row,
            self.account_readable(row["account_id"]),
            self.shares.get(("opportunity", row["id"]), set()),
        )

    def activity_readable(self, row: Row) -> bool:
        return perms.can_read_activity(
            self.caller,
            row["tenant_id"],
            self.account_readable(row["account_id"]),
            self.opportunity_readable(row["opportunity_id"]),
        )

    @property
    def account_names(self) -> dict[str, str]:
        return {k: v["name"] for k, v in self.accounts.items()}

    @property
    def opportunity_names(self) -> dict[str, str]:
        return {k: v["name"] for k, v in self.opportunities.items()}


def _load_scope(conn: sqlite3.Connection, caller: User) -> _Scope:
    tenant = (caller.tenant_id,)
    shares: dict[tuple[str, str], set[str]] = {}
    for row in conn.execute("SELECT * FROM shares WHERE tenant_id = ?", tenant):
        shares.setdefault((row["record_type"], row["record_id"]), set()).add(row["user_id"])
    parties: dict[str, list[str]] = {}
    for row in conn.execute(
        "SELECT p.activity_id, p.party_id FROM activity_parties p JOIN activities a ON a.id = p.activity_id"
        " WHERE a.tenant_id = ? AND p.party_type = 'contact' ORDER BY p.activity_id, p.rowid",
        tenant,
    ):
        parties.setdefault(row["activity_id"], []).append(row["party_id"])
    due = {
        row["activity_id"]: str(row["scheduled_end"])[:10]
        for row in conn.execute(
            "SELECT s.activity_id, s.scheduled_end FROM activity_states s JOIN activities a"
            " ON a.id = s.activity_id WHERE a.tenant_id = ? AND a.type = 'task' AND s.scheduled_end IS NOT NULL",
            tenant,
        )
    }
    return _Scope(
        caller=caller,
        accounts={r["id"]: r for r in conn.execute("SELECT * FROM accounts WHERE tenant_id = ?", tenant)},
        opportunities={
            r["id"]: r for r in conn.execute("SELECT * FROM opportunities WHERE tenant_id = ?", tenant)
        },
        shares=shares,
        contacts={r["id"]: r for r in conn.execute("SELECT * FROM contacts WHERE tenant_id = ?", tenant)},
        parties=parties,
        due=due,
    )


def closed_moments(conn: sqlite3.Connection, tenant_id: str) -> dict[str, str]:
    """When each closed deal of the tenant closed: the moment its change history last moved its
    stage into the Closed stage it has now (its creation's, if it was created closed), else its
    last modification. A CRM stamps the close itself (Dataverse's ``actualclosedate``)."""
    closed = {
        r["id"]: r
        for r in conn.execute(
            "SELECT id, stage, modified_at FROM opportunities WHERE tenant_id = ? AND stage IN (?, ?)",
            (tenant_id, *CLOSED_STAGES),
        )
    }
    moments: dict[str, str] = {}
    for row in conn.execute(
        "SELECT record_id, changed_at, changes FROM record_history WHERE tenant_id = ?"
        " AND record_type = 'opportunity' ORDER BY changed_at, id",
        (tenant_id,),
    ):
        deal = closed.get(row["record_id"])
        if deal is None:
            continue
        stage = json.loads(row["changes"]).get("stage")
        if isinstance(stage, list) and len(stage) == 2 and stage[0] != deal["stage"] == stage[1]:
            moments[row["record_id"]] = row["changed_at"]
    return {deal_id: moments.get(deal_id, deal["modified_at"]) for deal_id, deal in closed.items()}


def _opportunity_view(
    caller: User, row: Row, account_names: Mapping[str, str], *, full: bool, closed_at: str | None = None
) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": row["id"],
        "name": row["name"],
        "account": _ref(row["account_id"], account_names),
        "stage": row["stage"],
        "amount": row["amount"],
        "currency": row["currency"],
        "close_date": row["close_date"],
        "probability": row["probability"],
        "next_step": row["next_step"],
        "owner": _person(row["owner_id"]),
        "version": row["version"],
        "modified_at": row["modified_at"],
    }
    if closed_at is not None:
        view["closed_at"] = closed_at
    if full:
        view["created_at"] = row["created_at"]
        view["modified_by"] = _person(row["modified_by"])
    if "commission" in perms.visible_opportunity_fields(caller):
        view["commission"] = row["commission"]
    return view


def _activity_view(row: Row, scope: _Scope) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": row["id"],
        "external_id": row["external_id"],
        "type": row["type"],
        "subject": row["subject"],
        "notes": row["notes"],
        "occurred_at": row["occurred_at"],
        "account": _ref(row["account_id"], scope.account_names),
        "opportunity": _ref(row["opportunity_id"], scope.opportunity_names),
        "owner": _person(row["owner_id"]),
        "version": row["version"],
        "voided": row["voided_at"] is not None,
        # The people it names (a contact the caller cannot read is left out, like any record).
        "contacts": [
            {"id": c, "name": scope.contacts[c]["name"]}
            for c in scope.parties.get(row["id"], [])
            if scope.contact_readable(c)
        ],
    }
    if row["type"] == "task":
        view["due_date"] = scope.due.get(row["id"])
    if row["voided_at"] is not None:
        view |= {
            "voided_at": row["voided_at"],
            "voided_by": _person(row["voided_by"]),
            "void_reason": row["void_reason"],
        }
    return view


def _opportunity_access(caller: User, row: Row) -> dict[str, bool]:
    """Effective access on a readable opportunity (like Dataverse RetrievePrincipalAccess)."""
    return {
        "read": True,
        "edit": perms.can_update_opportunity(caller, row["owner_id"]),
        "log_activity": True,
    }


def _account_access(caller: User, row: Row) -> dict[str, bool]:
    """Effective access on a readable account: anyone who reads it may log activities on it."""
    return {
        "read": True,
        "edit": perms.can_edit_account(caller, row["owner_id"]),
        "log_activity": True,
    }


def _args_hash(opportunity_id: str, expected_version: int, changes: Mapping[str, Any]) -> str:
    canonical = json.dumps(
        {"opportunity_id": opportunity_id, "expected_version": expected_version, "changes": changes},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _require(code: perms.Denial | None, kind: str, record_id: str) -> None:
    if code == "not_found":
        raise CrmError("not_found", f"{kind} {record_id} not found", {"id": record_id})
    if code == "permission_denied":
        raise CrmError(
            "permission_denied", f"You do not have access to {kind.lower()} {record_id}", {"id": record_id}
        )


class CrmService:
    """The sandbox CRM: records in SQLite, permissions from ``sandbox.permissions``."""

    def __init__(self, db_path: Path, today: Callable[[], date] | None = None) -> None:
        self.db_path = db_path
        self.today: Callable[[], date] = today or (lambda: datetime.now(UTC).date())
        """The CRM's today (``SandboxSettings.today``): its defaults follow the seed date."""
        db.ensure_schema(db_path, self.today())

    # --- lookups shared by several methods --------------------------------------------

    def _account(self, scope: _Scope, account_id: str) -> Row:
        row = scope.accounts.get(account_id)
        _require(
            perms.denial(scope.caller, _tenant_of(row), scope.account_readable(account_id)),
            "Account",
            account_id,
        )
        assert row is not None
        return row

    def _opportunity(self, scope: _Scope, opportunity_id: str) -> Row:
        row = scope.opportunities.get(opportunity_id)
        allowed = scope.opportunity_readable(opportunity_id)
        _require(perms.denial(scope.caller, _tenant_of(row), allowed), "Opportunity", opportunity_id)
        assert row is not None
        return row

    # --- reads ------------------------------------------------------------------------

    def search_accounts(
        self, caller: User, query: str = "", limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> dict[str, Any]:
        """Readable accounts whose name, industry or city contains ``query`` (case-insensitive)."""
        _check_limit(limit)
        needle = _text(query or "", "query", 200, required=False).lower()
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
        items = [
            {
                "id": row["id"],
                "name": row["name"],
                "industry": row["industry"],
                "territory": row["territory"],
                "owner": _user_name(row["owner_id"]),
                "city": row["city"],
                "version": row["version"],
            }
            for row in sorted(scope.accounts.values(), key=lambda r: (r["name"].lower(), r["id"]))
            if scope.account_readable(row["id"])
            and any(needle in str(row[f]).lower() for f in ("name", "industry", "city"))
        ]
        return _page(items, limit, cursor)

    def get_account(self, caller: User, account_id: str) -> dict[str, Any]:
        """One account with its owner and roll-ups (open pipeline, recent activity, contacts)."""
        since = (self.today() - timedelta(days=30)).strftime("%Y-%m-%dT00:00:00Z")
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
            row = self._account(scope, account_id)
            activities = conn.execute(
                "SELECT COUNT(*) AS n FROM activities"
                " WHERE account_id = ? AND voided_at IS NULL AND occurred_at >= ?",
                (account_id, since),
            ).fetchone()["n"]
            contacts = conn.execute(
                "SELECT COUNT(*) AS n FROM contacts WHERE account_id = ?", (account_id,)
            ).fetchone()["n"]
        open_opps = [
            o
            for o in scope.opportunities.values()
            if o["account_id"] == account_id and o["stage"] in OPEN_STAGES
        ]
        return {
            "id": row["id"],
            "name": row["name"],
            "industry": row["industry"],
            "territory": row["territory"],
            "city": row["city"],
            "website": row["website"],
            "owner": _person(row["owner_id"]),
            "version": row["version"],
            "modified_at": row["modified_at"],
            "modified_by": _person(row["modified_by"]),
            "open_opportunities": len(open_opps),
            "open_pipeline_amount": round(sum((o["amount"] for o in open_opps), 0.0), 2),
            "activities_last_30_days": activities,
            "contacts": contacts,
            "access": _account_access(caller, row),
        }

    def list_opportunities(
        self,
        caller: User,
        account_id: str | None = None,
        owner: Literal["me", "any"] = "any",
        stage: str | None = None,
        closing_after: str | None = None,
        closing_before: str | None = None,
        open_only: bool = True,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        closed_since: str | None = None,
    ) -> dict[str, Any]:
        """Readable opportunities, soonest close first. An explicit ``stage`` overrides ``open_only``;
        ``closed_since`` lists only deals won or lost at or after that moment (``open_only`` aside).
        A closed deal carries ``closed_at``: when it closed (:func:`closed_moments`)."""
        _check_limit(limit)
        if owner not in ("me", "any"):
            raise _invalid("owner must be 'me' or 'any'", field="owner")
        if stage is not None and stage not in STAGES:
            raise _invalid(f"unknown stage {stage!r}", field="stage", allowed=list(STAGES))
        after = _parse_date(closing_after, "closing_after").isoformat() if closing_after else None
        before = _parse_date(closing_before, "closing_before").isoformat() if closing_before else None
        closed_ts = _parse_instant(closed_since, "closed_since") if closed_since else None
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
            closed_at = closed_moments(conn, caller.tenant_id)
        if account_id is not None:
            self._account(scope, account_id)
        names = scope.account_names

        def wanted(row: Row) -> bool:
            if closed_ts is not None:
                return (
                    row["id"] in closed_at
                    and closed_at[row["id"]] >= closed_ts
                    and (stage is None or row["stage"] == stage)
                )
            return row["stage"] == stage if stage else (not open_only or row["stage"] in OPEN_STAGES)

        items = [
            _opportunity_view(caller, row, names, full=False, closed_at=closed_at.get(row["id"]))
            for row in sorted(scope.opportunities.values(), key=lambda r: (r["close_date"], r["id"]))
            if scope.opportunity_readable(row["id"])
            and (account_id is None or row["account_id"] == account_id)
            and (owner == "any" or row["owner_id"] == caller.id)
            and wanted(row)
            and (after is None or row["close_date"] >= after)
            and (before is None or row["close_date"] <= before)
        ]
        return _page(items, limit, cursor)

    def get_me(self, caller: User) -> dict[str, Any]:
        """The caller's own user record, their manager and their direct reports.

        What a real CRM's user hierarchy gives (Dataverse: ``systemuser`` with
        ``parentsystemuserid`` and ``azureactivedirectoryobjectid``): ids, names, roles and
        Entra object ids, no records. Only the caller's own reporting line is shown.
        """
        manager = find_user(caller.manager_id) if caller.manager_id else None

        def person(user: User) -> dict[str, Any]:
            return {"id": user.id, "name": user.name, "role": user.role, "aad_object_id": user.aad_object_id}

        return {
            **person(caller),
            "tenant_id": caller.tenant_id,
            "email": caller.email,
            "territory": caller.territory,
            "manager": None if manager is None else person(manager),
            "direct_reports": [person(u) for u in reports_of(caller.id)],
        }

    def get_opportunity(self, caller: User, opportunity_id: str) -> dict[str, Any]:
        """One opportunity with every field the caller may see."""
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
            closed_at = closed_moments(conn, caller.tenant_id)
        row = self._opportunity(scope, opportunity_id)
        view = _opportunity_view(
            caller, row, scope.account_names, full=True, closed_at=closed_at.get(opportunity_id)
        )
        view["access"] = _opportunity_access(caller, row)
        return view

    def get_contact(self, caller: User, contact_id: str) -> dict[str, Any]:
        """One contact of a readable account (readable exactly when its account is)."""
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
            row = conn.execute("SELECT * FROM contacts WHERE id = ?", (contact_id,)).fetchone()
        readable = row is not None and scope.account_readable(row["account_id"])
        _require(perms.denial(caller, _tenant_of(row), readable), "Contact", contact_id)
        assert row is not None
        return {
            "id": row["id"],
            "name": row["name"],
            "title": row["title"],
            "email": row["email"],
            "phone": row["phone"],
            "account": _ref(row["account_id"], scope.account_names),
            "created_at": row["created_at"],
        }

    def list_activities(
        self,
        caller: User,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        since: str | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        include_voided: bool = False,
    ) -> dict[str, Any]:
        """Readable activities, newest first, optionally for one account / opportunity / period."""
        _check_limit(limit)
        since_ts = _parse_instant(since, "since") if since else None
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
            rows = conn.execute(
                "SELECT * FROM activities WHERE tenant_id = ? ORDER BY occurred_at DESC, id DESC",
                (caller.tenant_id,),
            ).fetchall()
        if account_id is not None:
            self._account(scope, account_id)
        if opportunity_id is not None:
            self._opportunity(scope, opportunity_id)
        items = [
            _activity_view(row, scope)
            for row in rows
            if (account_id is None or row["account_id"] == account_id)
            and (opportunity_id is None or row["opportunity_id"] == opportunity_id)
            and (since_ts is None or row["occurred_at"] >= since_ts)
            and (include_voided or row["voided_at"] is None)
            and scope.activity_readable(row)
        ]
        return _page(items, limit, cursor)

    def get_record_history(
        self, caller: User, record_type: str, record_id: str, since: str | None = None
    ) -> dict[str, Any]:
        """A readable account's or opportunity's kept versions, oldest first: when, who, and each
        changed field's old and new value (fields the caller may not see are left out)."""
        if record_type not in ("opportunity", "account"):
            raise _invalid("record_type must be 'opportunity' or 'account'", field="record_type")
        since_ts = _parse_instant(since, "since") if since else None
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
            if record_type == "opportunity":
                self._opportunity(scope, record_id)
            else:
                self._account(scope, record_id)
            rows = db.record_history(conn, record_type, record_id)
        hidden = (
            set()
            if record_type != "opportunity"
            else set(perms.OPPORTUNITY_FIELDS) - set(perms.visible_opportunity_fields(caller))
        )
        items = []
        for row in rows:
            if since_ts is not None and row["changed_at"] < since_ts:
                continue
            changes = [
                {"field": name, "old": pair[0], "new": pair[1]}
                for name, pair in row["changes"].items()
                if name not in hidden
            ]
            if changes:
                items.append(
                    {
                        "record_id": record_id,
                        "version": row["version"],
                        "changed_at": row["changed_at"],
                        "changed_by": _person(row["changed_by"]),
                        "operation": row["operation"],
                        "changes": changes,
                    }
                )
        return {"record_type": record_type, "record_id": record_id, "items": items}

    def list_contacts(
        self,
        caller: User,
        account_id: str | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Contacts of one readable account, by name; or, with ``name`` and no account, the
        contacts of every readable account whose name contains it (case-insensitive)."""
        _check_limit(limit)
        needle = _text(name or "", "name", 200, required=False).lower()
        if account_id is None and not needle:
            raise _invalid("give an account_id, or a name to look for", field="account_id")
        with db.transaction(self.db_path, write=False) as conn:
            scope = _load_scope(conn, caller)
            if account_id is not None:
                self._account(scope, account_id)
                accounts = [account_id]
            else:
                accounts = sorted(a for a in scope.accounts if scope.account_readable(a))
            marks = ", ".join("?" for _ in accounts) or "NULL"
            rows = conn.execute(
                "SELECT id, name, title, email, phone, account_id, created_at FROM contacts"
                f" WHERE account_id IN ({marks}) ORDER BY name, id",
                tuple(accounts),
            ).fetchall()
        if needle:
            rows = [r for r in rows if needle in str(r["name"]).lower()]
        return _page(rows, limit, cursor)

    def pipeline_summary(
        self,
        caller: User,
        scope: Literal["mine", "team"] = "mine",
        period_start: str | None = None,
        period_end: str | None = None,
    ) -> dict[str, Any]:
        """Open pipeline closing in a period (default: this calendar quarter), by stage.

        ``mine`` = the caller's own opportunities; ``team`` = a manager's reports plus
        their own, or for a rep the readable opportunities of their territory.
        """
        if scope not in ("mine", "team"):
            raise _invalid("scope must be 'mine' or 'team'", field="scope")
        default_start, default_end = _current_quarter(self.today())
        start = _parse_date(period_start, "period_start") if period_start else default_start
        end = _parse_date(period_end, "period_end") if period_end else default_end
        if end < start:
            raise _invalid("period_end is before period_start", field="period_end")
        with db.transaction(self.db_path, write=False) as conn:
            view = _load_scope(conn, caller)
        team = {caller.id} | {u.id for u in reports_of(caller.id)}

        def in_scope(row: Row) -> bool:
            if scope == "mine":
                return bool(row["owner_id"] == caller.id)
            if caller.role == "manager":
                return row["owner_id"] in team
            account = view.accounts.get(row["account_id"])
            return account is not None and account["territory"] == caller.territory

        chosen = sorted(
            (
                row
                for row in view.opportunities.values()
                if row["stage"] in OPEN_STAGES
                and start.isoformat() <= row["close_date"] <= end.isoformat()
                and in_scope(row)
                and view.opportunity_readable(row["id"])
            ),
            key=lambda r: (r["close_date"], r["id"]),
        )
        by_stage = [
            {
                "stage": stage,
                "count": sum(1 for r in chosen if r["stage"] == stage),
                "amount": round(sum((r["amount"] for r in chosen if r["stage"] == stage), 0.0), 2),
            }
            for stage in OPEN_STAGES
        ]
        return {
            "scope": scope,
            "period": {"start": start.isoformat(), "end": end.isoformat()},
            "currency": "USD",
            "by_stage": by_stage,
            "count": len(chosen),
            "total_amount": round(sum((r["amount"] for r in chosen), 0.0), 2),
            "weighted_amount": round(sum((r["amount"] * r["probability"] / 100 for r in chosen), 0.0), 2),
            "opportunity_ids": [r["id"] for r in chosen],
        }

    # --- writes -----------------------------------------------------------------------

    def upsert_activity(
        self,
        caller: User,
        external_id: str,
        type: Literal["call", "meeting", "email", "task"],
        subject: str,
        notes: str = "",
        occurred_at: str | None = None,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        contact_ids: Sequence[str] | None = None,
        due_date: str | None = None,
    ) -> dict[str, Any]:
        """Create an activity once per (tenant, external_id); a repeat returns the stored one.

        A repeat with different fields is an ``idempotency_mismatch``, never a second
        write. An omitted ``occurred_at`` defaults to now and is not compared on repeats
        (a retry cannot reproduce "now"). ``contact_ids`` are the people taking part (each a
        contact the caller can read); ``due_date`` is a task's due date.
        """
        external_id = _text(external_id, "external_id", 200, required=True)
        if type not in ACTIVITY_TYPES:
            raise _invalid(f"type must be one of {', '.join(ACTIVITY_TYPES)}", field="type")
        subject = _text(subject, "subject", MAX_SUBJECT, required=True)
        notes = _text(notes or "", "notes", MAX_NOTES, required=False)
        when = _parse_instant(occurred_at, "occurred_at") if occurred_at is not None else None
        if account_id is None and opportunity_id is None:
            raise _invalid("account_id or opportunity_id is required", field="account_id")
        contacts = tuple(
            dict.fromkeys(_text(c, "contact_ids", 200, required=True) for c in contact_ids or ())
        )
        if len(contacts) > MAX_ACTIVITY_CONTACTS:
            raise _invalid(f"at most {MAX_ACTIVITY_CONTACTS} contacts", field="contact_ids")
        due = _parse_date(due_date, "due_date").isoformat() if due_date else None
        if due is not None and type != "task":
            raise _invalid("only a task has a due date", field="due_date")
        # Under BEGIN IMMEDIATE the read-then-insert cannot race; the retry only covers a
        # writer that bypasses this service and wins the unique constraint.
        for _attempt in range(2):
            try:
                return self._upsert_activity_once(
                    caller, external_id, type, subject, notes, when, account_id, opportunity_id, contacts, due
                )
            except sqlite3.IntegrityError:
                continue
        raise CrmError("unavailable", "could not store the activity; retry")

    def _upsert_activity_once(
        self,
        caller: User,
        external_id: str,
        kind: str,
        subject: str,
        notes: str,
        when: str | None,
        account_id: str | None,
        opportunity_id: str | None,
        contacts: tuple[str, ...] = (),
        due: str | None = None,
    ) -> dict[str, Any]:
        with db.transaction(self.db_path, write=True) as conn:
            scope = _load_scope(conn, caller)
            for contact_id in contacts:
                # Named only if the caller may read the contact (as Dataverse's activity parties).
                contact = scope.contacts.get(contact_id)
                readable = contact is not None and scope.contact_readable(contact_id)
                _require(perms.denial(caller, _tenant_of(contact), readable), "Contact", contact_id)
            account_ok: bool | None = None
            opportunity_ok: bool | None = None
            if account_id is not None:
                row = scope.accounts.get(account_id)
                _require(perms.denial(caller, _tenant_of(row), True), "Account", account_id)
                account_ok = scope.account_readable(account_id)
            if opportunity_id is not None:
                opp = scope.opportunities.get(opportunity_id)
                _require(perms.denial(caller, _tenant_of(opp), True), "Opportunity", opportunity_id)
                assert opp is not None
                if account_id is not None and opp["account_id"] != account_id:
                    raise _invalid(
                        f"opportunity {opportunity_id} does not belong to account {account_id}",
                        field="opportunity_id",
                    )
                account_id = opp["account_id"]
                opportunity_ok = scope.opportunity_readable(opportunity_id)
            if not perms.can_create_activity(caller, account_ok, opportunity_ok):
                denied = opportunity_id if opportunity_ok is False else account_id
                raise CrmError("permission_denied", f"You do not have access to {denied}", {"id": denied})

            wanted = {
                "type": kind,
                "subject": subject,
                "notes": notes,
                "account_id": account_id,
                "opportunity_id": opportunity_id,
                "owner_id": caller.id,
            }
            if when is not None:
                wanted["occurred_at"] = when
            existing = conn.execute(
                "SELECT * FROM activities WHERE tenant_id = ? AND external_id = ?",
                (caller.tenant_id, external_id),
            ).fetchone()
            if existing is not None:
                differing = sorted(k for k, v in wanted.items() if existing[k] != v)
                if tuple(scope.parties.get(existing["id"], [])) != contacts:
                    differing.append("contact_ids")
                if scope.due.get(existing["id"]) != due:
                    differing.append("due_date")
                if differing:
                    visible = scope.activity_readable(existing)
                    raise CrmError(
                        "idempotency_mismatch",
                        f"external_id {external_id} was already used with different fields",
                        {"existing": _activity_view(existing, scope), "differing_fields": differing}
                        if visible
                        else {"differing_fields": differing},
                    )
                return {"activity": _activity_view(existing, scope), "created": False}

            now = db.utc_now()
            activity_id = f"act-{uuid.uuid4().hex[:12]}"
            conn.execute(
                "INSERT INTO activities (id, tenant_id, external_id, type, subject, notes, occurred_at,"
                " account_id, opportunity_id, owner_id, created_at, version)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (
                    activity_id,
                    caller.tenant_id,
                    external_id,
                    kind,
                    subject,
                    notes,
                    when or now,
                    account_id,
                    opportunity_id,
                    caller.id,
                    now,
                ),
            )
            # Parties and a due date live where the Dataverse face keeps them, so both faces agree.
            for contact_id in contacts:
                conn.execute(
                    "INSERT OR IGNORE INTO activity_parties (activity_id, participation_type, party_type,"
                    " party_id) VALUES (?, ?, 'contact', ?)",
                    (activity_id, PARTY_TYPE.get(kind, PARTY_REGARDING), contact_id),
                )
            if due is not None:
                conn.execute(
                    "INSERT INTO activity_states (activity_id, statecode, statuscode, scheduled_start,"
                    " scheduled_end) VALUES (?, 0, ?, NULL, ?)",
                    (activity_id, TASK_NOT_STARTED, f"{due}T00:00:00Z"),
                )
            scope.parties[activity_id] = list(contacts)
            if due is not None:
                scope.due[activity_id] = due
            row = conn.execute("SELECT * FROM activities WHERE id = ?", (activity_id,)).fetchone()
            return {"activity": _activity_view(row, scope), "created": True}

    def _validated_changes(self, caller: User, changes: object) -> dict[str, Any]:
        if not isinstance(changes, dict) or not changes:
            raise _invalid("changes must be a non-empty object", field="changes")
        writable = perms.writable_opportunity_fields(caller)
        unknown = sorted(k for k in changes if k not in perms.OPPORTUNITY_FIELDS)
        if unknown:
            raise _invalid(f"unknown opportunity fields: {', '.join(map(str, unknown))}", fields=unknown)
        protected = sorted(k for k in changes if k not in writable)
        if protected:
            raise CrmError(
                "permission_denied", f"You may not change: {', '.join(protected)}", {"fields": protected}
            )
        clean: dict[str, Any] = {}
        for key, value in changes.items():
            if key == "stage":
                if value not in STAGES:
                    raise _invalid(f"unknown stage {value!r}", field="stage", allowed=list(STAGES))
                clean[key] = value
            elif key == "close_date":
                clean[key] = _parse_date(value, "close_date").isoformat()
            elif key == "amount":
                clean[key] = round(_number(value, "amount", 0, 1e12), 2)
            elif key == "probability":
                clean[key] = round(_number(value, "probability", 0, 100))
            elif key == "next_step":
                clean[key] = _text(value, "next_step", MAX_NEXT_STEP, required=False)
        return clean

    def update_opportunity(
        self,
        caller: User,
        opportunity_id: str,
        expected_version: int,
        changes: dict[str, Any],
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Change an opportunity under an optimistic version check, in one write transaction.

        Returns the updated record and the old values of the fields that were changed.
        Closing a deal sets probability to 100 (won) or 0 (lost).

        With an ``idempotency_key`` (per tenant) the successful result is stored in the
        same transaction as the update: repeating the call with the same key and the
        same arguments returns that result with ``"replayed": true`` and writes nothing
        (even though ``expected_version`` is stale by then); the same key with other
        arguments, or from another user, is an ``idempotency_mismatch``. Refused calls
        (conflict, permission, validation) store nothing, so they can be retried.
        """
        if (
            isinstance(expected_version, bool)
            or not isinstance(expected_version, int)
            or expected_version < 1
        ):
            raise _invalid("expected_version must be a positive integer", field="expected_version")
        request_key = None
        if idempotency_key is not None:
            request_key = _text(idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY, required=True)
        clean = self._validated_changes(caller, changes)
        if clean.get("stage") in CLOSED_PROBABILITY:
            clean["probability"] = CLOSED_PROBABILITY[clean["stage"]]
        args_hash = _args_hash(opportunity_id, expected_version, clean)
        with db.transaction(self.db_path, write=True) as conn:
            if request_key is not None:
                replay = self._replay(conn, caller, request_key, "update_opportunity", args_hash)
                if replay is not None:
                    return replay
            scope = _load_scope(conn, caller)
            row = self._opportunity(scope, opportunity_id)
            if not perms.can_update_opportunity(caller, row["owner_id"]):
                raise CrmError(
                    "permission_denied",
                    f"Only the owner or the owner's manager can change {opportunity_id}",
                    {"id": opportunity_id},
                )
            if row["version"] != expected_version:
                raise CrmError(
                    "conflict",
                    f"{opportunity_id} changed since version {expected_version};"
                    f" it is now version {row['version']}",
                    {"current": _opportunity_view(caller, row, scope.account_names, full=True)},
                )
            previous = {key: row[key] for key in clean}
            assignments = ", ".join(f"{key} = ?" for key in clean)
            conn.execute(
                f"UPDATE opportunities SET {assignments}, version = version + 1,"
                " modified_at = ?, modified_by = ? WHERE id = ? AND version = ?",
                (*clean.values(), db.utc_now(), caller.id, opportunity_id, expected_version),
            )
            updated = conn.execute("SELECT * FROM opportunities WHERE id = ?", (opportunity_id,)).fetchone()
            db.record_change(
                conn,
                tenant_id=caller.tenant_id,
                record_type="opportunity",
                record_id=opportunity_id,
                version=updated["version"],
                changed_by=caller.id,
                changed_at=updated["modified_at"],
                changes={k: (previous[k], updated[k]) for k in clean if previous[k] != updated[k]},
            )
            result: dict[str, Any] = {
                "opportunity": _opportunity_view(caller, updated, scope.account_names, full=True),
                "previous": previous,
            }
            if request_key is not None:
                conn.execute(
                    "INSERT INTO applied_requests (tenant_id, idempotency_key, caller_id, tool,"
                    " args_hash, result_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        caller.tenant_id,
                        request_key,
                        caller.id,
                        "update_opportunity",
                        args_hash,
                        json.dumps(result, default=str),
                        db.utc_now(),
                    ),
                )
                result["replayed"] = False
        return result

    @staticmethod
    def _replay(
        conn: sqlite3.Connection, caller: User, key: str, tool: str, args_hash: str
    ) -> dict[str, Any] | None:
        """The stored result of an already applied request, or None if ``key`` is new."""
        applied = conn.execute(
            "SELECT * FROM applied_requests WHERE tenant_id = ? AND idempotency_key = ?",
            (caller.tenant_id, key),
        ).fetchone()
        if applied is None:
            return None
        if applied["caller_id"] != caller.id or applied["tool"] != tool or applied["args_hash"] != args_hash:
            raise CrmError(
                "idempotency_mismatch",
                f"idempotency_key {key} was already used for a different request",
                {"idempotency_key": key},
            )
        stored: dict[str, Any] = json.loads(applied["result_json"])
        return {**stored, "replayed": True}

    def void_activity(self, caller: User, activity_id: str, reason: str) -> dict[str, Any]:
        """Mark an activity void (records are never deleted); voiding twice is a no-op."""
        reason = _text(reason, "reason", MAX_REASON, required=True)
        with db.transaction(self.db_path, write=True) as conn:
            scope = _load_scope(conn, caller)
            row = conn.execute("SELECT * FROM activities WHERE id = ?", (activity_id,)).fetchone()
            _require(perms.denial(caller, _tenant_of(row), True), "Activity", activity_id)
            if not perms.can_void_activity(caller, row["owner_id"]):
                raise CrmError(
                    "permission_denied",
                    f"Only the owner or their manager can void {activity_id}",
                    {"id": activity_id},
                )
            if row["voided_at"] is None:
                conn.execute(
                    "UPDATE activities SET voided_at = ?, voided_by = ?, void_reason = ?,"
                    " version = version + 1 WHERE id = ?",
                    (db.utc_now(), caller.id, reason, activity_id),
                )
                row = conn.execute("SELECT * FROM activities WHERE id = ?", (activity_id,)).fetchone()
        return _activity_view(row, scope)
