"""Dataverse-shaped reads and writes over the sandbox CRM's own rows, under its access rules.

Both Dataverse surfaces (Web API and MCP) go through :class:`DataverseService`, so the
rules hold the same on each: rows the caller cannot read drop out of queries, a direct
read or write of one is 403 (404 across tenants, where it does not exist), secured
columns read back as null and writing them is 403. Visibility comes from
:mod:`sandbox.crm`'s per-caller scope, so it is the sandbox's one set of rules.

ETags are the rows' own ``version`` columns (bumped by every write through any surface),
so ``W/"<version>"`` is weak, per-row monotonic and shared with the sandbox's MCP server.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from sandbox import db
from sandbox import permissions as perms
from sandbox.crm import OPEN_STAGES, PARTY_REGARDING, _load_scope, _Scope, closed_moments
from sandbox.dataverse import errors
from sandbox.dataverse.ids import guid_for, parse_guid
from sandbox.dataverse.schema import (
    ACTIVITY_ENTITY_BY_TYPE,
    STATES,
    TYPE_BY_ACTIVITY_ENTITY,
    Entity,
    default_status,
    entities,
    sales_stages,
)
from sandbox.directory import USERS, User, find_user

Row = dict[str, Any]
"""A row in Dataverse shape."""
Raw = Mapping[str, Any]
"""A row of the sandbox's own tables."""
KIND_BY_ENTITY = {
    "account": "account",
    "contact": "contact",
    "opportunity": "opportunity",
    "systemuser": "systemuser",
    "phonecall": "activity",
    "task": "activity",
    "appointment": "activity",
    "email": "activity",
    "activitypointer": "activity",
}
MAX_DESCRIPTION = 500  # the CRM's next_step limit, which the opportunity description maps onto
MAX_SUBJECT = 200
MAX_NOTES = 4000


def _stage_index(stage: object) -> int:
    return OPEN_STAGES.index(str(stage)) if stage in OPEN_STAGES else len(OPEN_STAGES) - 1


_AUDIT_COLUMNS: dict[str, tuple[tuple[str, Any], ...]] = {
    "name": (("name", str),),
    "stage": (
        ("salesstage", _stage_index),
        ("stepname", lambda s: f"{_stage_index(s) + 1}-{s}" if s in OPEN_STAGES else s),
        ("statecode", lambda s: opportunity_state(str(s))[0]),
    ),
    "amount": (("estimatedvalue", float),),
    "close_date": (("estimatedclosedate", str),),
    "probability": (("closeprobability", int),),
    "next_step": (("description", str),),
    "commission": (("new_commission", float),),
}
"""An audited field of the sandbox CRM → the Dataverse columns (and their values) it shows as."""


def etag(version: int) -> str:
    """The weak ETag of a row at ``version``."""
    return f'W/"{version}"'


def _parse_instant(value: object, column: str) -> str:
    if isinstance(value, str):
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise errors.bad_request(
        f"Cannot convert the literal '{value}' to the expected type 'Edm.DateTimeOffset' ({column})."
    )


def _parse_date(value: object, column: str) -> str:
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip()[:10]).isoformat()
        except ValueError:
            pass
    raise errors.bad_request(
        f"Cannot convert the literal '{value}' to the expected type 'Edm.Date' ({column})."
    )


def _string(value: object, column: str, max_length: int, *, required: bool = False) -> str:
    if not isinstance(value, str):
        raise errors.bad_request(
            f"Cannot convert the literal '{value}' to the expected type 'Edm.String' ({column})."
        )
    if required and not value.strip():
        raise errors.bad_request(f"{column} is required and cannot be empty.")
    if len(value) > max_length:
        raise errors.bad_request(
            f"A validation error occurred. The length of the '{column}' attribute exceeded the maximum allowed length of '{max_length}'."
        )
    return value


def _int(value: object, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.bad_request(
            f"Cannot convert the literal '{value}' to the expected type 'Edm.Int32' ({column})."
        )
    return value


def _number(value: object, column: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.bad_request(
            f"Cannot convert the literal '{value}' to the expected type 'Edm.Decimal' ({column})."
        )
    return float(value)


@dataclass
class Snapshot:
    """One caller's view of their tenant, loaded in one transaction."""

    caller: User
    scope: _Scope
    contacts: dict[str, Row]
    activities: dict[str, Row]
    states: dict[str, Row]
    parties: dict[str, list[Row]]
    key_column: str
    opportunity_keys: dict[str, str] = field(default_factory=dict)
    """Opportunity id → the write key its last keyed update stamped (``record_keys``)."""
    closed_at: dict[str, str] = field(default_factory=dict)
    """Closed opportunity id → when it closed (:func:`sandbox.crm.closed_moments`)."""
    _guids: dict[str, dict[str, str]] = field(default_factory=dict)

    # --- GUID lookups ------------------------------------------------------------------

    def raw(self, entity: str, sandbox_id: str | None) -> Raw | None:
        """The sandbox row behind ``sandbox_id`` (same tenant, readable or not)."""
        if sandbox_id is None:
            return None
        kind = KIND_BY_ENTITY[entity]
        if kind == "account":
            return self.scope.accounts.get(sandbox_id)
        if kind == "opportunity":
            return self.scope.opportunities.get(sandbox_id)
        if kind == "contact":
            return self.contacts.get(sandbox_id)
        if kind == "systemuser":
            user = find_user(sandbox_id)
            if user is None or user.id != sandbox_id or user.tenant_id != self.caller.tenant_id:
                return None
            return {"id": user.id, "tenant_id": user.tenant_id}
        row = self.activities.get(sandbox_id)
        if row is None or not _activity_matches(entity, row):
            return None
        return row

    def sandbox_id(self, entity: str, guid: str) -> str | None:
        """The sandbox id of the record with Dataverse id ``guid`` in the caller's tenant."""
        kind = KIND_BY_ENTITY[entity]
        mapping = self._guids.get(kind)
        if mapping is None:
            ids: list[str]
            if kind == "account":
                ids = list(self.scope.accounts)
            elif kind == "opportunity":
                ids = list(self.scope.opportunities)
            elif kind == "contact":
                ids = list(self.contacts)
            elif kind == "systemuser":
                ids = [u.id for u in USERS if u.tenant_id == self.caller.tenant_id]
            else:
                ids = list(self.activities)
            mapping = {guid_for(kind, i): i for i in ids}
            self._guids[kind] = mapping
        found = mapping.get(guid)
        return found if found is not None and self.raw(entity, found) is not None else None

    def by_key(self, entity: str, key_value: str) -> Raw | None:
        """The activity of ``entity``'s type whose alternate key is ``key_value``."""
        for row in self.activities.values():
            if row["external_id"] == key_value and _activity_matches(entity, row):
                return row
        return None

    # --- visibility --------------------------------------------------------------------

    def readable(self, entity: str, row: Raw) -> bool:
        """Whether the caller may read ``row`` (a sandbox row of ``entity``)."""
        kind = KIND_BY_ENTITY[entity]
        if kind == "account":
            return self.scope.account_readable(row["id"])
        if kind == "opportunity":
            return self.scope.opportunity_readable(row["id"])
        if kind == "contact":
            return self.scope.account_readable(row["account_id"])
        if kind == "systemuser":
            return True
        return self.scope.activity_readable(row)

    # --- Dataverse shape ---------------------------------------------------------------

    def rows(self, entity: str) -> list[Row]:
        """Every row of ``entity`` the caller may read, in Dataverse shape, in id order."""
        kind = KIND_BY_ENTITY[entity]
        source: list[Raw]
        if kind == "account":
            source = list(self.scope.accounts.values())
        elif kind == "opportunity":
            source = list(self.scope.opportunities.values())
        elif kind == "contact":
            source = list(self.contacts.values())
        elif kind == "systemuser":
            source = [{"id": u.id} for u in USERS if u.tenant_id == self.caller.tenant_id]
        else:
            source = [r for r in self.activities.values() if _activity_matches(entity, r)]
        shaped = [self.shape(entity, r) for r in source if self.readable(entity, r)]
        return sorted(shaped, key=lambda r: str(r[entities(self.key_column)[entity].primary_id]))

    def visible(self, entity: str, guid: str) -> Row | None:
        """The Dataverse row ``guid`` of ``entity`` if the caller may read it, else None."""
        sandbox_id = self.sandbox_id(entity, guid)
        row = self.raw(entity, sandbox_id)
        if row is None or not self.readable(entity, row):
            return None
        return self.shape(entity, row)

    def shape(self, entity: str, row: Raw) -> Row:
        """A sandbox row in Dataverse shape (``@odata.etag``, ``_x_value`` lookups, secured nulls)."""
        kind = KIND_BY_ENTITY[entity]
        if kind == "account":
            return _account(row)
        if kind == "contact":
            return _contact(row)
        if kind == "opportunity":
            return _opportunity(
                self.caller,
                row,
                self.key_column,
                self.opportunity_keys.get(row["id"]),
                self.closed_at.get(row["id"]),
            )
        if kind == "systemuser":
            return _systemuser(row["id"])
        return _activity(row, self.states.get(row["id"]), self.key_column, self.parties.get(row["id"], []))

    def parties_of(self, entity: str, guid: str) -> list[Row]:
        """The parties of activity ``guid`` (callers have already read the activity itself)."""
        sandbox_id = self.sandbox_id(entity, guid)
        return activity_parties(self.parties.get(sandbox_id or "", []))

    def activity_state(self, row: Raw) -> tuple[int, int]:
        """An activity's (statecode, statuscode), stored or derived."""
        return _activity_state(row, self.states.get(row["id"]))


REGARDING_MASK = PARTY_REGARDING
"""``participationtypemask`` 8: the record an activity regards, when that is a contact."""


def _activity_matches(entity: str, row: Raw) -> bool:
    if entity == "activitypointer":
        return True
    return TYPE_BY_ACTIVITY_ENTITY.get(entity) == row["type"]


def _user_guid(user_id: str | None) -> str | None:
    return None if user_id is None else guid_for("systemuser", user_id)


def _account(row: Raw) -> Row:
    return {
        "@odata.etag": etag(row["version"]),
        "accountid": guid_for("account", row["id"]),
        "name": row["name"],
        "address1_city": row["city"],
        "websiteurl": row["website"],
        "new_industry": row["industry"],
        "new_territory": row["territory"],
        "_ownerid_value": _user_guid(row["owner_id"]),
        "_modifiedby_value": _user_guid(row["modified_by"]),
        "modifiedon": row["modified_at"],
        "statecode": 0,
        "statuscode": 1,
        "versionnumber": row["version"],
    }


def _contact(row: Raw) -> Row:
    first, _, last = str(row["name"]).partition(" ")
    # Contacts are read-only on every surface, so their version never moves.
    return {
        "@odata.etag": etag(1),
        "contactid": guid_for("contact", row["id"]),
        "fullname": row["name"],
        "firstname": first,
        "lastname": last,
        "jobtitle": row["title"],
        "emailaddress1": row["email"],
        "telephone1": row["phone"],
        "_parentcustomerid_value": guid_for("account", row["account_id"]),
        "createdon": row["created_at"] or None,
        "statecode": 0,
        "statuscode": 1,
        "versionnumber": 1,
    }


def opportunity_state(stage: str) -> tuple[int, int]:
    """(statecode, statuscode) of an opportunity at the CRM's ``stage``."""
    if stage == "Closed Won":
        return 1, 3
    if stage == "Closed Lost":
        return 2, 4
    return 0, 1


def currency_row(guid: str) -> Row | None:
    """The ``transactioncurrency`` row ``guid`` names (one per ISO code the CRM uses)."""
    for code in CURRENCY_CODES:
        if guid_for("transactioncurrency", code) == guid:
            return {"transactioncurrencyid": guid, "isocurrencycode": code, "currencyname": code}
    return None


CURRENCY_CODES = ("USD", "EUR", "GBP", "AED", "JPY", "CAD", "AUD", "CHF", "INR", "BRL")
"""The ISO codes the sandbox CRM's deals may carry (its transactioncurrency rows)."""


def _opportunity(
    caller: User, row: Raw, key_column: str, key_value: str | None, closed_at: str | None = None
) -> Row:
    """An opportunity row; ``closed_at`` (a closed deal's close moment) is its ``actualclosedate``."""
    stage = row["stage"]
    index = OPEN_STAGES.index(stage) if stage in OPEN_STAGES else len(OPEN_STAGES) - 1
    statecode, statuscode = opportunity_state(stage)
    commission = row["commission"] if "commission" in perms.visible_opportunity_fields(caller) else None
    account = guid_for("account", row["account_id"])
    return {
        "@odata.etag": etag(row["version"]),
        "opportunityid": guid_for("opportunity", row["id"]),
        "name": row["name"],
        "description": row["next_step"],
        "salesstage": index,
        "stepname": f"{index + 1}-{stage}" if stage in OPEN_STAGES else stage,
        "estimatedvalue": row["amount"],
        "estimatedclosedate": row["close_date"],
        "actualclosedate": closed_at[:10] if closed_at and statecode != 0 else None,
        "closeprobability": row["probability"],
        "new_commission": commission,
        key_column: key_value,
        "_parentaccountid_value": account,
        "_customerid_value": account,
        "_transactioncurrencyid_value": guid_for("transactioncurrency", row["currency"]),
        "_ownerid_value": _user_guid(row["owner_id"]),
        "_modifiedby_value": _user_guid(row["modified_by"]),
        "createdon": row["created_at"],
        "modifiedon": row["modified_at"],
        "statecode": statecode,
        "statuscode": statuscode,
        "versionnumber": row["version"],
    }


def _systemuser(user_id: str) -> Row:
    user = find_user(user_id)
    assert user is not None
    return {
        "@odata.etag": etag(1),
        "systemuserid": guid_for("systemuser", user.id),
        "fullname": user.name,
        "internalemailaddress": user.email,
        "azureactivedirectoryobjectid": user.aad_object_id,
        "new_territory": user.territory,
        "_parentsystemuserid_value": _user_guid(user.manager_id),
        "statecode": 0,
        "statuscode": 1,
        "versionnumber": 1,
    }


def _activity_state(row: Raw, state: Raw | None) -> tuple[int, int]:
    entity = ACTIVITY_ENTITY_BY_TYPE[row["type"]]
    if row["voided_at"] is not None:
        return 2, default_status(entity, 2)
    if state is not None:
        return int(state["statecode"]), int(state["statuscode"])
    # Rows the CRM logged itself: calls, meetings and emails happened (completed); tasks are to do.
    statecode = 0 if row["type"] == "task" else 1
    if entity == "phonecall" and statecode == 1:
        return 1, 2
    return statecode, default_status(entity, statecode)


def _activity(row: Raw, state: Raw | None, key_column: str, parties: Sequence[Raw] = ()) -> Row:
    entity = ACTIVITY_ENTITY_BY_TYPE[row["type"]]
    statecode, statuscode = _activity_state(row, state)
    regarding_entity = "opportunity" if row["opportunity_id"] else "account"
    regarding_id = row["opportunity_id"] or row["account_id"]
    # A contact it regards (a Regarding party) stands for its account (stored as the row's).
    about = [p for p in parties if p["participation_type"] == REGARDING_MASK and p["party_type"] == "contact"]
    if about and not row["opportunity_id"]:
        regarding_entity, regarding_id = "contact", about[0]["party_id"]
    shaped: Row = {
        "@odata.etag": etag(row["version"]),
        "activityid": guid_for("activity", row["id"]),
        "subject": row["subject"],
        "description": row["notes"],
        "activitytypecode": entity,
        "scheduledstart": state["scheduled_start"] if state else None,
        "scheduledend": state["scheduled_end"] if state else None,
        "actualend": row["occurred_at"] if statecode == 1 else None,
        "createdon": row["created_at"],
        "_regardingobjectid_value": None
        if regarding_id is None
        else guid_for(regarding_entity, regarding_id),
        "_ownerid_value": _user_guid(row["owner_id"]),
        key_column: row["external_id"],
        "statecode": statecode,
        "statuscode": statuscode,
        "versionnumber": row["version"],
    }
    if regarding_id is not None:
        shaped["_regardingobjectid_value@Microsoft.Dynamics.CRM.lookuplogicalname"] = regarding_entity
    return shaped


def activity_parties(parties: Sequence[Raw]) -> list[Row]:
    """An activity's ``activityparty`` rows, as ``$expand=<activity>_activity_parties`` (or
    ``activity_pointer_activity_parties``) returns them."""
    return [
        {
            "activitypartyid": guid_for(
                "activityparty",
                f"{p['activity_id']}:{p['participation_type']}:{p['party_type']}:{p['party_id']}",
            ),
            "_activityid_value": guid_for("activity", p["activity_id"]),
            "participationtypemask": p["participation_type"],
            "_partyid_value": guid_for(p["party_type"], p["party_id"]),
            "_partyid_value@Microsoft.Dynamics.CRM.lookuplogicalname": p["party_type"],
        }
        for p in parties
    ]


def load_snapshot(conn: sqlite3.Connection, caller: User, key_column: str) -> Snapshot:
    """Everything of the caller's tenant the Dataverse face needs, from one transaction."""
    tenant = (caller.tenant_id,)
    activities = {r["id"]: r for r in conn.execute("SELECT * FROM activities WHERE tenant_id = ?", tenant)}
    states = {
        r["activity_id"]: r
        for r in conn.execute(
            "SELECT s.* FROM activity_states s JOIN activities a ON a.id = s.activity_id WHERE a.tenant_id = ?",
            tenant,
        )
    }
    parties: dict[str, list[Row]] = {}
    for r in conn.execute(
        "SELECT p.* FROM activity_parties p JOIN activities a ON a.id = p.activity_id"
        " WHERE a.tenant_id = ? ORDER BY p.activity_id, p.participation_type, p.party_id",
        tenant,
    ):
        parties.setdefault(r["activity_id"], []).append(r)
    return Snapshot(
        caller=caller,
        scope=_load_scope(conn, caller),
        contacts={r["id"]: r for r in conn.execute("SELECT * FROM contacts WHERE tenant_id = ?", tenant)},
        activities=activities,
        states=states,
        parties=parties,
        key_column=key_column,
        opportunity_keys={
            r["record_id"]: r["key_value"]
            for r in conn.execute(
                "SELECT k.record_id, k.key_value FROM record_keys k JOIN opportunities o ON o.id = k.record_id"
                " WHERE k.record_type = 'opportunity' AND o.tenant_id = ?",
                tenant,
            )
        },
        closed_at=closed_moments(conn, caller.tenant_id),
    )


def check_etag(current_version: int, if_match: str | None) -> None:
    """412 when ``If-Match`` names another version (``*`` matches any existing row)."""
    if if_match is None or if_match.strip() == "*":
        return
    wanted = if_match.strip()
    if wanted not in (etag(current_version), f'"{current_version}"', str(current_version)):
        raise errors.version_mismatch()


@dataclass(frozen=True)
class _Bind:
    column: str
    target: str
    sandbox_id: str


class DataverseService:
    """Reads and writes of the Dataverse face, each in one sandbox transaction."""

    def __init__(self, db_path: Path, key_column: str) -> None:
        self.db_path = db_path
        self.key_column = key_column
        self.tables = entities(key_column)

    # --- reads ---------------------------------------------------------------------------

    def snapshot(self, caller: User) -> Snapshot:
        """The caller's view, for queries, expansion and the MCP tools."""
        with db.transaction(self.db_path, write=False) as conn:
            return load_snapshot(conn, caller, self.key_column)

    def get(self, caller: User, entity: str, guid: str) -> tuple[Row, Snapshot]:
        """One row by GUID: 404 if it does not exist for the caller's tenant, 403 if unreadable."""
        snap = self.snapshot(caller)
        return self._readable(snap, entity, guid), snap

    def get_by_key(self, caller: User, entity: str, key_value: str) -> tuple[Row, Snapshot]:
        """One activity by its alternate key (404 when no row has it)."""
        snap = self.snapshot(caller)
        row = snap.by_key(entity, key_value)
        if row is None:
            raise errors.not_found(entity, f"{self.key_column}={key_value}")
        if not snap.readable(entity, row):
            raise self._read_denied(caller, entity, guid_for("activity", row["id"]))
        return snap.shape(entity, row), snap

    def _readable(self, snap: Snapshot, entity: str, guid: str) -> Row:
        sandbox_id = snap.sandbox_id(entity, guid)
        row = snap.raw(entity, sandbox_id)
        if row is None:
            raise errors.not_found(entity, guid)
        if not snap.readable(entity, row):
            raise self._read_denied(snap.caller, entity, guid)
        return snap.shape(entity, row)

    def change_history(self, caller: User, entity: str, guid: str) -> list[Row]:
        """``RetrieveRecordChangeHistory``: the record's audit details, oldest first, each an
        ``AttributeAuditDetail`` (its ``audit`` row, and the changed columns' old and new values).
        Only an account's or an opportunity's history is kept; 404 / 403 as a read of the row."""
        if entity not in ("opportunity", "account"):
            raise errors.bad_request(f"Auditing is not enabled for the entity {entity}.")
        with db.transaction(self.db_path, write=False) as conn:
            snap = load_snapshot(conn, caller, self.key_column)
            self._readable(snap, entity, guid)
            sandbox_id = snap.sandbox_id(entity, guid)
            assert sandbox_id is not None
            history = db.record_history(conn, entity, sandbox_id)
        secured = "commission" not in perms.visible_opportunity_fields(caller)
        details: list[Row] = []
        for version in history:
            old: Row = {"@odata.type": f"#Microsoft.Dynamics.CRM.{entity}"}
            new: Row = {"@odata.type": f"#Microsoft.Dynamics.CRM.{entity}"}
            for name, (before, after) in version["changes"].items():
                if name == "commission" and secured:
                    continue  # a secured column's audit is not shown to who may not read it
                for column, value_of in _AUDIT_COLUMNS.get(name, ()):
                    old[column] = None if before is None else value_of(before)
                    new[column] = None if after is None else value_of(after)
            create = version["operation"] == "create"
            details.append(
                {
                    "@odata.type": "#Microsoft.Dynamics.CRM.AttributeAuditDetail",
                    "AuditRecord": {
                        "@odata.type": "#Microsoft.Dynamics.CRM.audit",
                        "auditid": guid_for("audit", str(version["id"])),
                        "createdon": version["changed_at"],
                        "operation": 1 if create else 2,
                        "action": 1 if create else 2,
                        "objecttypecode": entity,
                        "_objectid_value": guid,
                        "_userid_value": guid_for("systemuser", version["changed_by"]),
                    },
                    "OldValue": old,
                    "NewValue": new,
                    "DeletedAttributes": {"Count": 0, "Keys": [], "Values": []},
                    "InvalidNewValueAttributes": [],
                    "LocLabelLanguageCode": 0,
                }
            )
        return details

    @staticmethod
    def _read_denied(caller: User, entity: str, guid: str) -> errors.DataverseError:
        return errors.privilege_denied(
            f"Principal user (Id={guid_for('systemuser', caller.id)}, type=8) is missing prvRead"
            f"{entity.capitalize()} privilege on record {entity} With Id = {guid}"
        )

    # --- writes --------------------------------------------------------------------------

    def create(self, caller: User, entity: str, body: Mapping[str, Any]) -> Row:
        """Insert a row (activities only: the sandbox's users create no accounts or deals)."""
        table = self._writable_table(caller, entity, "Create")
        with db.transaction(self.db_path, write=True) as conn:
            snap = load_snapshot(conn, caller, self.key_column)
            key_value = body.get(self.key_column)
            if key_value is not None:
                key_value = _string(key_value, self.key_column, 100, required=True)
                if snap.by_key(entity, key_value) is not None or self._key_taken(conn, caller, key_value):
                    raise errors.duplicate_key()
            activity_id = self._insert_activity(conn, snap, table, body, key_value)
            return self._reload_activity(conn, caller, entity, activity_id)

    def update(
        self, caller: User, entity: str, guid: str, body: Mapping[str, Any], *, if_match: str | None = None
    ) -> Row:
        """Change a row under an optional ``If-Match`` check (404 / 403 / 412 as Dataverse)."""
        table = self._writable_table(caller, entity, "Write")
        with db.transaction(self.db_path, write=True) as conn:
            snap = load_snapshot(conn, caller, self.key_column)
            sandbox_id = snap.sandbox_id(entity, guid)
            row = snap.raw(entity, sandbox_id)
            if row is None:
                raise errors.not_found(entity, guid)
            if not snap.readable(entity, row):
                raise self._read_denied(caller, entity, guid)
            check_etag(row["version"], if_match)
            if entity == "opportunity":
                self._update_opportunity(conn, snap, table, row, body)
                updated = conn.execute("SELECT * FROM opportunities WHERE id = ?", (row["id"],)).fetchone()
                stamped = conn.execute(
                    "SELECT key_value FROM record_keys WHERE record_type = 'opportunity' AND record_id = ?",
                    (row["id"],),
                ).fetchone()
                return _opportunity(
                    caller, updated, self.key_column, stamped["key_value"] if stamped else None
                )
            self._update_activity(conn, snap, table, row, body)
            return self._reload_activity(conn, caller, entity, row["id"])

    def upsert_by_key(
        self,
        caller: User,
        entity: str,
        key_value: str,
        body: Mapping[str, Any],
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> tuple[Row, bool]:
        """``PATCH set(key='v')``: create when missing, update when present; returns (row, created).

        ``If-Match: *`` makes it update-only (404 when missing), ``If-None-Match: *``
        create-only (412 when present). Key values in the body are ignored on update.
        """
        table = self._writable_table(caller, entity, "Write")
        if table.alternate_key is None:
            raise errors.bad_request(f"The entity {entity} has no alternate key.")
        with db.transaction(self.db_path, write=True) as conn:
            snap = load_snapshot(conn, caller, self.key_column)
            row = snap.by_key(entity, key_value)
            if row is None:
                if if_match is not None:
                    raise errors.not_found(entity, f"{self.key_column}={key_value}")
                if self._key_taken(conn, caller, key_value):
                    # The sandbox keeps one key space for every activity type.
                    raise errors.duplicate_key()
                activity_id = self._insert_activity(conn, snap, table, body, key_value)
                return self._reload_activity(conn, caller, entity, activity_id), True
            if if_none_match is not None and if_none_match.strip() == "*":
                raise errors.duplicate_key()
            guid = guid_for("activity", row["id"])
            if not snap.readable(entity, row):
                raise self._read_denied(caller, entity, guid)
            check_etag(row["version"], if_match)
            changes = {k: v for k, v in body.items() if k != self.key_column}
            self._update_activity(conn, snap, table, row, changes)
            return self._reload_activity(conn, caller, entity, row["id"]), False

    def delete(self, caller: User, entity: str, guid: str, *, if_match: str | None = None) -> None:
        """Delete an activity (its owner or the owner's manager); other tables refuse deletes."""
        self._writable_table(caller, entity, "Delete")
        if entity == "opportunity":
            raise errors.privilege_denied(
                f"Principal user (Id={guid_for('systemuser', caller.id)}, type=8) is missing"
                " prvDeleteOpportunity privilege"
            )
        with db.transaction(self.db_path, write=True) as conn:
            snap = load_snapshot(conn, caller, self.key_column)
            row = snap.raw(entity, snap.sandbox_id(entity, guid))
            if row is None:
                raise errors.not_found(entity, guid)
            if not snap.readable(entity, row):
                raise self._read_denied(caller, entity, guid)
            if not perms.can_void_activity(caller, row["owner_id"]):
                raise errors.privilege_denied(f"Only the owner or their manager can delete {entity} {guid}")
            check_etag(row["version"], if_match)
            conn.execute("DELETE FROM activity_parties WHERE activity_id = ?", (row["id"],))
            conn.execute("DELETE FROM activity_states WHERE activity_id = ?", (row["id"],))
            conn.execute("DELETE FROM activities WHERE id = ?", (row["id"],))

    # --- helpers -------------------------------------------------------------------------

    def _writable_table(self, caller: User, entity: str, privilege: str) -> Entity:
        table = self.tables.get(entity)
        if table is None:
            raise errors.bad_request(f"Resource not found for the segment '{entity}'.")
        if not table.writable or (entity == "opportunity" and privilege == "Create"):
            raise errors.privilege_denied(
                f"Principal user (Id={guid_for('systemuser', caller.id)}, type=8) is missing"
                f" prv{privilege}{entity.capitalize()} privilege"
            )
        return table

    @staticmethod
    def _key_taken(conn: sqlite3.Connection, caller: User, key_value: str) -> bool:
        return (
            conn.execute(
                "SELECT 1 FROM activities WHERE tenant_id = ? AND external_id = ?",
                (caller.tenant_id, key_value),
            ).fetchone()
            is not None
        )

    def _reload_activity(self, conn: sqlite3.Connection, caller: User, entity: str, activity_id: str) -> Row:
        snap = load_snapshot(conn, caller, self.key_column)
        row = snap.activities[activity_id]
        return snap.shape(entity, row)

    def _binds(self, snap: Snapshot, table: Entity, body: Mapping[str, Any]) -> dict[str, _Bind]:
        """``<navprop>@odata.bind`` values resolved to sandbox ids, by lookup column."""
        binds: dict[str, _Bind] = {}
        for key, value in body.items():
            if not key.endswith("@odata.bind"):
                continue
            nav_name = key[: -len("@odata.bind")]
            nav = table.nav(nav_name)
            if nav is None:
                raise errors.bad_request(
                    f"An undeclared property '{nav_name}' which only has property annotations in the"
                    " payload but no property value was found in the payload. In OData, only declared"
                    " navigation properties and declared named streams can be represented as properties"
                    " without values."
                )
            target_id = self._resolve_reference(snap, nav.target, value)
            binds[nav.column] = _Bind(nav.column, nav.target, target_id)
        return binds

    def _resolve_reference(self, snap: Snapshot, target: str, value: object) -> str:
        target_table = self.tables[target]
        if not isinstance(value, str) or "(" not in value or not value.endswith(")"):
            raise errors.bad_request(
                f"Invalid @odata.bind value {value!r}: use '/{target_table.set_name}(<guid>)'."
            )
        head, _, rest = value[:-1].rpartition("(")
        set_name = head.rstrip("/").rsplit("/", 1)[-1]
        guid = parse_guid(rest)
        if set_name != target_table.set_name or guid is None:
            raise errors.bad_request(
                f"Invalid @odata.bind value {value!r}: use '/{target_table.set_name}(<guid>)'."
            )
        sandbox_id = snap.sandbox_id(target, guid)
        if sandbox_id is None:
            raise errors.not_found(target, guid)
        return sandbox_id

    def _parties(
        self, snap: Snapshot, table: Entity, body: Mapping[str, Any]
    ) -> list[tuple[int, str, str]] | None:
        value = body.get(table.parties_property)
        if value is None:
            return None
        if not isinstance(value, list):
            raise errors.bad_request(f"{table.parties_property} must be a collection.")
        parties: list[tuple[int, str, str]] = []
        for item in value:
            if not isinstance(item, dict):
                raise errors.bad_request(f"Each item of {table.parties_property} must be an object.")
            mask = _int(item.get("participationtypemask"), "participationtypemask")
            if mask not in table.party_masks:
                raise errors.bad_request(
                    f"participationtypemask {mask} is not valid for {table.logical_name}"
                    f" (allowed: {sorted(table.party_masks)})."
                )
            bound = [k for k in item if k.startswith("partyid_") and k.endswith("@odata.bind")]
            if len(bound) != 1:
                raise errors.bad_request(
                    "Each activity party needs exactly one 'partyid_<entity>@odata.bind'."
                )
            party_entity = bound[0][len("partyid_") : -len("@odata.bind")]
            if party_entity not in ("contact", "account", "systemuser"):
                raise errors.bad_request(f"An activity party cannot be a {party_entity}.")
            sandbox_id = self._resolve_reference(snap, party_entity, item[bound[0]])
            raw = snap.raw(party_entity, sandbox_id)
            if raw is None or not snap.readable(party_entity, raw):
                raise self._read_denied(snap.caller, party_entity, guid_for(party_entity, sandbox_id))
            parties.append((mask, KIND_BY_ENTITY[party_entity], sandbox_id))
        return parties

    def _check_columns(self, table: Entity, body: Mapping[str, Any], allowed: set[str]) -> None:
        for key in body:
            if key.startswith("@") or key.endswith("@odata.bind") or key == table.parties_property:
                continue
            column = table.column(key)
            if column is None:
                raise errors.bad_request(
                    f"The property '{key}' does not exist on type 'Microsoft.Dynamics.CRM.{table.logical_name}'."
                    " Make sure to only use property names that are defined by the type."
                )
            if column.secured:
                raise errors.privilege_denied(
                    f"AttributePermissionUpdateIsMissing: the user does not have update permission on the"
                    f" secured column '{column.name}' of {table.logical_name}."
                )
            if key not in allowed:
                raise errors.bad_request(f"The column '{key}' of {table.logical_name} cannot be set.")

    def _state(
        self, table: Entity, body: Mapping[str, Any], current: tuple[int, int] | None
    ) -> tuple[int, int] | None:
        if "statecode" not in body and "statuscode" not in body:
            return None
        states = STATES[table.logical_name]
        statecode = _int(body["statecode"], "statecode") if "statecode" in body else None
        statuscode = _int(body["statuscode"], "statuscode") if "statuscode" in body else None
        if statecode is None:
            statecode = next((s for s, (_, reasons) in states.items() if statuscode in reasons), None)
            if statecode is None:
                raise errors.bad_request(f"{statuscode} is not a valid status code for {table.logical_name}.")
        if statecode not in states:
            raise errors.bad_request(f"{statecode} is not a valid state code for {table.logical_name}.")
        if statuscode is None:
            statuscode = default_status(table.logical_name, statecode)
        if statuscode not in states[statecode][1]:
            raise errors.bad_request(
                f"{statuscode} is not a valid status code for state code {table.logical_name}State."
                f"{states[statecode][0]} on {table.logical_name}."
            )
        return statecode, statuscode

    def _activity_fields(self, table: Entity, body: Mapping[str, Any]) -> dict[str, Any]:
        allowed = {
            "subject",
            "description",
            "scheduledstart",
            "scheduledend",
            "actualend",
            "statecode",
            "statuscode",
            self.key_column,
        }
        self._check_columns(table, body, allowed)
        fields: dict[str, Any] = {}
        if "subject" in body:
            fields["subject"] = _string(body["subject"], "subject", MAX_SUBJECT, required=True).strip()
        if "description" in body:
            fields["notes"] = (
                "" if body["description"] is None else _string(body["description"], "description", MAX_NOTES)
            )
        for column, name in (("scheduledstart", "scheduled_start"), ("scheduledend", "scheduled_end")):
            if column in body:
                fields[name] = None if body[column] is None else _parse_instant(body[column], column)
        if body.get("actualend") is not None:
            fields["occurred_at"] = _parse_instant(body["actualend"], "actualend")
        return fields

    def _regarding(self, snap: Snapshot, binds: dict[str, _Bind]) -> tuple[str | None, str | None] | None:
        bind = binds.get("regardingobjectid")
        if bind is None:
            return None
        caller = snap.caller
        if bind.target == "contact":
            contact = snap.contacts.get(bind.sandbox_id)
            if contact is None or not snap.readable("contact", contact):
                raise self._read_denied(caller, "contact", guid_for("contact", bind.sandbox_id))
            return contact["account_id"], None
        if bind.target == "opportunity":
            opp = snap.scope.opportunities[bind.sandbox_id]
            readable = snap.scope.opportunity_readable(opp["id"])
            if not perms.can_create_activity(caller, None, readable):
                raise self._read_denied(caller, "opportunity", guid_for("opportunity", opp["id"]))
            return opp["account_id"], opp["id"]
        readable = snap.scope.account_readable(bind.sandbox_id)
        if not perms.can_create_activity(caller, readable, None):
            raise self._read_denied(caller, "account", guid_for("account", bind.sandbox_id))
        return bind.sandbox_id, None

    def _insert_activity(
        self,
        conn: sqlite3.Connection,
        snap: Snapshot,
        table: Entity,
        body: Mapping[str, Any],
        key_value: str | None,
    ) -> str:
        fields = self._activity_fields(table, body)
        if "subject" not in fields:
            raise errors.bad_request(f"subject is required to create a {table.logical_name}.")
        regarding = self._regarding(snap, self._binds(snap, table, body))
        if regarding is None:
            raise errors.bad_request(
                f"This sandbox needs a regarding record: bind regardingobjectid_account_{table.logical_name}"
                f" or regardingobjectid_opportunity_{table.logical_name}."
            )
        parties = self._parties(snap, table, body) or []
        bound = self._binds(snap, table, body).get("regardingobjectid")
        if bound is not None and bound.target == "contact":
            # The sandbox keeps the account on the row and the contact as a Regarding party.
            parties.append((REGARDING_MASK, "contact", bound.sandbox_id))
        state = self._state(table, body, None) or (0, default_status(table.logical_name, 0))
        now = db.utc_now()
        activity_id = f"act-{uuid.uuid4().hex[:12]}"
        caller = snap.caller
        conn.execute(
            "INSERT INTO activities (id, tenant_id, external_id, type, subject, notes, occurred_at,"
            " account_id, opportunity_id, owner_id, created_at, voided_at, voided_by, void_reason, version)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
            (
                activity_id,
                caller.tenant_id,
                key_value or f"dv-{uuid.uuid4().hex}",
                TYPE_BY_ACTIVITY_ENTITY[table.logical_name],
                fields["subject"],
                fields.get("notes", ""),
                fields.get("occurred_at", now),
                regarding[0],
                regarding[1],
                caller.id,
                now,
                now if state[0] == 2 else None,
                caller.id if state[0] == 2 else None,
                "Canceled" if state[0] == 2 else None,
            ),
        )
        conn.execute(
            "INSERT INTO activity_states (activity_id, statecode, statuscode, scheduled_start, scheduled_end)"
            " VALUES (?, ?, ?, ?, ?)",
            (activity_id, state[0], state[1], fields.get("scheduled_start"), fields.get("scheduled_end")),
        )
        for mask, party_type, party_id in parties:
            conn.execute(
                "INSERT OR IGNORE INTO activity_parties (activity_id, participation_type, party_type, party_id)"
                " VALUES (?, ?, ?, ?)",
                (activity_id, mask, party_type, party_id),
            )
        return activity_id

    def _update_activity(
        self, conn: sqlite3.Connection, snap: Snapshot, table: Entity, row: Raw, body: Mapping[str, Any]
    ) -> None:
        caller = snap.caller
        if not perms.can_void_activity(caller, row["owner_id"]):
            raise errors.privilege_denied(
                f"Principal user (Id={guid_for('systemuser', caller.id)}, type=8) is missing"
                f" prvWrite{table.logical_name.capitalize()} privilege: only the owner or their manager"
                " changes an activity"
            )
        current = snap.activity_state(row)
        new_state = self._state(table, body, current)
        if current[0] in (1, 2) and (new_state is None or new_state[0] in (1, 2)):
            # Completed and canceled activities are read-only until reopened (statecode 0).
            raise errors.bad_request(
                f"This {table.logical_name} is {'completed' if current[0] == 1 else 'canceled'} and"
                " read-only; set statecode to 0 to reopen it first."
            )
        fields = self._activity_fields(table, body)
        fields.pop(self.key_column, None)
        regarding = self._regarding(snap, self._binds(snap, table, body))
        parties = self._parties(snap, table, body)
        columns: dict[str, Any] = {
            k: v for k, v in fields.items() if k in ("subject", "notes", "occurred_at")
        }
        if regarding is not None:
            columns["account_id"], columns["opportunity_id"] = regarding
        state = new_state or current
        if state[0] == 2 and row["voided_at"] is None:
            columns |= {"voided_at": db.utc_now(), "voided_by": caller.id, "void_reason": "Canceled"}
        elif state[0] != 2 and row["voided_at"] is not None:
            columns |= {"voided_at": None, "voided_by": None, "void_reason": None}
        assignments = "".join(f"{k} = ?, " for k in columns)
        conn.execute(
            f"UPDATE activities SET {assignments}version = version + 1 WHERE id = ?",
            (*columns.values(), row["id"]),
        )
        stored = snap.states.get(row["id"])
        schedule = {
            "scheduled_start": stored["scheduled_start"] if stored else None,
            "scheduled_end": stored["scheduled_end"] if stored else None,
        }
        schedule |= {k: v for k, v in fields.items() if k in schedule}
        conn.execute(
            "INSERT INTO activity_states (activity_id, statecode, statuscode, scheduled_start, scheduled_end)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (activity_id) DO UPDATE SET statecode = excluded.statecode,"
            " statuscode = excluded.statuscode, scheduled_start = excluded.scheduled_start,"
            " scheduled_end = excluded.scheduled_end",
            (row["id"], state[0], state[1], schedule["scheduled_start"], schedule["scheduled_end"]),
        )
        if parties is not None:
            conn.execute("DELETE FROM activity_parties WHERE activity_id = ?", (row["id"],))
            for mask, party_type, party_id in parties:
                conn.execute(
                    "INSERT OR IGNORE INTO activity_parties (activity_id, participation_type, party_type,"
                    " party_id) VALUES (?, ?, ?, ?)",
                    (row["id"], mask, party_type, party_id),
                )

    def _update_opportunity(
        self, conn: sqlite3.Connection, snap: Snapshot, table: Entity, row: Raw, body: Mapping[str, Any]
    ) -> None:
        caller = snap.caller
        if "statecode" in body or "statuscode" in body:
            raise errors.bad_request(
                "An opportunity is closed with the WinOpportunity or LoseOpportunity action, not by"
                " setting statecode."
            )
        if row["stage"] not in OPEN_STAGES:
            raise errors.bad_request("This opportunity is closed and read-only until it is reopened.")
        if not perms.can_update_opportunity(caller, row["owner_id"]):
            raise errors.privilege_denied(
                f"Principal user (Id={guid_for('systemuser', caller.id)}, type=8) is missing"
                " prvWriteOpportunity privilege on this record: only the owner or the owner's manager"
                " changes it"
            )
        column_fields = {
            "salesstage": "stage",
            "stepname": "stage",
            "estimatedvalue": "amount",
            "estimatedclosedate": "close_date",
            "closeprobability": "probability",
            "description": "next_step",
        }
        writable = perms.writable_opportunity_fields(caller)
        self._check_columns(table, body, set(column_fields) | {"name", self.key_column})
        if any(k.endswith("@odata.bind") for k in body):
            raise errors.privilege_denied("Changing an opportunity's account or owner is not allowed here.")
        clean: dict[str, Any] = {}
        stamp: str | None = None
        for key, value in body.items():
            if key.startswith("@"):
                continue
            if key == self.key_column:
                # The writer's key for this update (crash recovery finds the update by it).
                stamp = _string(value, key, 100, required=True)
                continue
            field_name = column_fields.get(key)
            if field_name is None or field_name not in writable:
                raise errors.privilege_denied(
                    f"Principal user (Id={guid_for('systemuser', caller.id)}, type=8) may not change"
                    f" the column '{key}' of opportunity."
                )
            if key == "salesstage":
                stages = sales_stages()
                if _int(value, key) not in stages:
                    raise errors.bad_request(
                        f"{value} is not a valid option for salesstage ({sorted(stages)})."
                    )
                clean["stage"] = stages[value]
            elif key == "stepname":
                text = _string(value, key, 200)
                label = text.split("-", 1)[1] if text[:1].isdigit() and "-" in text else text
                if label not in OPEN_STAGES:
                    raise errors.bad_request(f"stepname must name an open stage: {', '.join(OPEN_STAGES)}.")
                clean["stage"] = label
            elif key == "estimatedvalue":
                amount = _number(value, key)
                if not 0 <= amount <= 1e12:
                    raise errors.bad_request("estimatedvalue must be between 0 and 1000000000000.")
                clean["amount"] = round(amount, 2)
            elif key == "estimatedclosedate":
                clean["close_date"] = _parse_date(value, key)
            elif key == "closeprobability":
                probability = _int(value, key)
                if not 0 <= probability <= 100:
                    raise errors.bad_request("closeprobability must be between 0 and 100.")
                clean["probability"] = probability
            elif key == "description":
                clean["next_step"] = "" if value is None else _string(value, key, MAX_DESCRIPTION)
        assignments = "".join(f"{k} = ?, " for k in clean)
        now = db.utc_now()
        conn.execute(
            f"UPDATE opportunities SET {assignments}version = version + 1, modified_at = ?, modified_by = ?"
            " WHERE id = ?",
            (*clean.values(), now, caller.id, row["id"]),
        )
        # The same history the CRM's own write keeps (Dataverse: the audit table).
        db.record_change(
            conn,
            tenant_id=caller.tenant_id,
            record_type="opportunity",
            record_id=row["id"],
            version=int(row["version"]) + 1,
            changed_by=caller.id,
            changed_at=now,
            changes={k: (row[k], v) for k, v in clean.items() if row[k] != v},
        )
        if stamp is not None:
            conn.execute(
                "INSERT INTO record_keys (record_type, record_id, key_value) VALUES ('opportunity', ?, ?)"
                " ON CONFLICT (record_type, record_id) DO UPDATE SET key_value = excluded.key_value",
                (row["id"], stamp),
            )
