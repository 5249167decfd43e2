"""The Dataverse connector's writer: Dynamics 365 Sales through the Web API v9.2, as the rep.

Dataverse's MCP write tools take no version and no idempotency key (last writer wins), so the
copilot's writes use the Web API, with the rep's on-behalf-of bearer token:

* a record's version is its row version, read from the weak ETag ``@odata.etag`` (``W/"<n>"``);
* an opportunity update is ``PATCH /opportunities(<id>)`` with ``If-Match: W/"<n>"``: a 412
  (``0x80060882``) is a conflict, answered with the record re-read. The same PATCH stores the
  write's key in the key column (``CRM_DATAVERSE_KEY_COLUMN``), so an update an earlier attempt
  applied is recognised by its key (``find_update``, and on a 412) and never called a conflict;
* an activity is created exactly once by a create-only upsert on the key column, an alternate
  key of each activity table: ``PATCH /phonecalls(<keycolumn>='<key>')`` with ``If-None-Match: *``.
  A 412 there means an earlier attempt created it: it is read back by the key and returned;
* voiding an activity PATCHes its ``statecode`` / ``statuscode`` to Canceled;
* 429 (with ``Retry-After``), 5xx and network failures raise :class:`CrmUnavailable` carrying
  the delay, for the retry middleware; Dataverse's error bodies (``{"error": {"code", "message"}}``)
  map onto :class:`CrmCallError` codes.

The vocabulary (stages with their option values, the editable columns) is read from the
opportunity's metadata (:func:`load_vocabulary`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, assert_never
from urllib.parse import quote

import httpx

from copilot.crm.types import (
    ActivityRef,
    ActivityRequest,
    ActivityResult,
    Conflict,
    CrmRecord,
    OpportunityUpdate,
    TargetKind,
    Updated,
)
from copilot.errors import CrmCallError, CrmUnavailable
from copilot.settings import Settings
from copilot.vocabulary import EDITABLE_OPPORTUNITY_FIELDS, Vocabulary

API_PATH: Final = "/api/data/v9.2"
CONCURRENCY_MISMATCH: Final = "0x80060882"
"""ConcurrencyVersionMismatch: the If-Match ETag is stale."""
OBJECT_DOES_NOT_EXIST: Final = "0x80040217"
DUPLICATE_RECORD: Final = "0x80040333"
CANCELED_STATE: Final = 2
"""``statecode`` of a canceled activity (task, phonecall, appointment)."""

DEFAULT_STAGE_CODES: Final[dict[str, int]] = {"Qualify": 0, "Develop": 1, "Propose": 2, "Close": 3}
"""Dataverse's out-of-the-box ``salesstage`` options: the fallback when the metadata says nothing."""

OPPORTUNITY_COLUMNS: Final[dict[str, str]] = {
    "name": "name",
    "stage": "salesstage",
    "close_date": "estimatedclosedate",
    "amount": "estimatedvalue",
    "next_step": "description",
    "probability": "closeprobability",
}
"""The copilot's opportunity fields → Dataverse columns by default (``stage``'s column is the stage
setting; ``CRM_DATAVERSE_OPPORTUNITY_COLUMNS`` overrides any of them). Dynamics 365 has no
out-of-the-box "next step" column: ``description`` holds it unless a tenant names its own."""
_PARTY_MASK: Final[dict[str, int]] = {"phonecall": 2, "appointment": 5}
"""How contacts take part: a call's To (2), a meeting's required attendees (5). A task has no parties."""
_ETAG = re.compile(r'^(?:W/)?"(\d+)"$')
_JSON_HEADERS: Final = {
    "Accept": "application/json",
    "OData-MaxVersion": "4.0",
    "OData-Version": "4.0",
}
TRANSIENT_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class DataverseConfig:
    """What the writer needs of the settings (one environment)."""

    base_url: str
    """``<CRM_URL>/api/data/v9.2``."""
    key_column: str = "new_copilotkey"
    entity_sets: dict[str, str] = field(default_factory=dict)
    activity_tables: dict[str, str] = field(default_factory=dict)
    stage_attribute: str = "salesstage"
    canceled_status: dict[str, int] = field(default_factory=dict)
    timeout_seconds: float = 15.0
    ca_file: str | None = None
    """``CRM_CA_BUNDLE``: the CRM's private CA, if it has one."""
    opportunity_columns: dict[str, str] = field(default_factory=lambda: dict(OPPORTUNITY_COLUMNS))
    """The copilot's opportunity fields → this tenant's columns."""

    @classmethod
    def from_settings(cls, settings: Settings) -> DataverseConfig:
        """The ``dataverse`` connector's configuration (``CRM_URL`` and ``CRM_DATAVERSE_*``)."""
        if settings.crm_url is None:
            raise CrmCallError("configuration", "CRM_KIND=dataverse needs CRM_URL")
        return cls(
            base_url=settings.crm_url.rstrip("/") + API_PATH,
            key_column=settings.crm_dataverse_key_column,
            entity_sets=dict(settings.crm_dataverse_entity_sets),
            activity_tables=dict(settings.crm_dataverse_activity_tables),
            stage_attribute=settings.crm_dataverse_stage_attribute,
            canceled_status=dict(settings.crm_dataverse_canceled_status),
            timeout_seconds=settings.crm_timeout_seconds,
            ca_file=settings.crm_ca_file,
            opportunity_columns={**OPPORTUNITY_COLUMNS, **settings.crm_dataverse_opportunity_columns},
        )

    def entity_set(self, logical_name: str) -> str:
        """The Web API entity set of a table (its logical name + ``s`` if not configured)."""
        return self.entity_sets.get(logical_name, f"{logical_name}s")


TokenSource = Callable[[], Awaitable[str]]


def version_of(etag: object) -> int | None:
    """The row version inside a Dataverse ETag (``W/"12345"`` → 12345); None if there is none."""
    if not isinstance(etag, str):
        return None
    match = _ETAG.match(etag.strip())
    return int(match.group(1)) if match else None


def etag_for(version: int) -> str:
    """The weak ETag Dataverse gives a row at ``version`` (for ``If-Match``)."""
    return f'W/"{version}"'


def _key_literal(value: str) -> str:
    """An OData string literal for a key segment: quotes doubled, then percent-encoded."""
    return "'" + quote(value.replace("'", "''"), safe="'") + "'"


def _error_of(response: httpx.Response) -> tuple[str, str]:
    """Dataverse's ``{"error": {"code", "message"}}`` (code often empty)."""
    try:
        body = response.json()
    except ValueError:
        return "", response.text[:200]
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "", str(body)[:200]
    return str(error.get("code") or ""), str(error.get("message") or "")


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


_PRIVILEGE = re.compile(r"\b(prv[A-Za-z]+)\b")


def _permission_message(message: str, *, writing: bool) -> str:
    """What the rep is told when the CRM's security refuses a request: plainly, naming the missing
    privilege if the CRM did, and without the CRM's own text (it echoes user and record GUIDs,
    which would then pass as ids a tool result showed)."""
    privilege = _PRIVILEGE.search(message)
    needs = f" (your CRM security role lacks {privilege.group(1)} on it)" if privilege else ""
    if writing:
        return f"the CRM does not let you change this record{needs}; nothing was written"
    return f"the CRM does not let you read this record{needs}"


def refusal(response: httpx.Response, *, writing: bool = False) -> CrmCallError | CrmUnavailable:
    """The copilot's error for a Dataverse error answer (any status the caller did not expect);
    ``writing``: the request was a write (its refusal says nothing was written)."""
    status = response.status_code
    code, message = _error_of(response)
    if status in TRANSIENT_STATUSES:
        return CrmUnavailable(
            f"the CRM answered HTTP {status}; live CRM data is unavailable ({message or 'no detail'})",
            retry_after=_retry_after(response),
            status=status,
            dataverse_code=code,
        )
    details = {"status": status, "dataverse_code": code}
    if status in (401, 403):
        return CrmCallError("permission_denied", _permission_message(message, writing=writing), details)
    if status == 404 or code == OBJECT_DOES_NOT_EXIST:
        return CrmCallError("not_found", message or "the record does not exist", details)
    if code == DUPLICATE_RECORD:
        return CrmCallError("duplicate", message, details)
    if status == 412:
        return CrmCallError("conflict", message, details)
    return CrmCallError("validation", message or f"the CRM answered HTTP {status}", details)


class DataverseWriter:
    """:class:`~copilot.crm.types.CrmWriter` over the Dataverse Web API, as one rep."""

    def __init__(
        self,
        config: DataverseConfig,
        token: TokenSource,
        vocabulary: Vocabulary,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._config = config
        self._token = token
        self._vocabulary = vocabulary
        self._transport = transport

    # --- HTTP ----------------------------------------------------------------------------------

    async def send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One Web API request as the rep; transport failures and throttling are outages."""
        sent = {**_JSON_HEADERS, "Authorization": f"Bearer {await self._token()}", **(headers or {})}
        if body is not None:
            sent["Content-Type"] = "application/json"
        transport = self._transport
        if transport is None:
            # Imported here: the MCP transport module pulls the MCP client, not needed by tests
            # that hand a transport in.
            from copilot.tools.mcp_http import shared_transport

            transport = shared_transport(self._config.ca_file)
        try:
            async with httpx.AsyncClient(transport=transport, timeout=self._config.timeout_seconds) as client:
                response = await client.request(
                    method, f"{self._config.base_url}/{path}", params=params, json=body, headers=sent
                )
        except (httpx.TimeoutException, httpx.NetworkError) as exc:
            raise CrmUnavailable(f"live CRM data is unavailable ({type(exc).__name__})") from exc
        if response.status_code in TRANSIENT_STATUSES:
            raise refusal(response)
        return response

    async def get_row(self, path: str, select: tuple[str, ...], expand: str | None = None) -> dict[str, Any]:
        """One row (``path``: an entity set and key) with ``select``'s columns; refusals raise."""
        params = {"$select": ",".join(select)}
        if expand:
            params["$expand"] = expand
        response = await self.send("GET", path, params=params)
        if response.status_code != 200:
            raise refusal(response)
        body: dict[str, Any] = response.json()
        return body

    # --- records -------------------------------------------------------------------------------

    def _columns(self) -> dict[str, str]:
        return {**self._config.opportunity_columns, "stage": self._config.stage_attribute}

    def opportunity_values(self, row: dict[str, Any]) -> dict[str, Any]:
        """A Web API opportunity row under the copilot's field names (version = its ETag's number)."""
        columns = self._columns()
        values: dict[str, Any] = {
            "id": row.get("opportunityid"),
            "version": version_of(row.get("@odata.etag")),
        }
        for name, column in columns.items():
            if column in row:
                values[name] = row[column]
        if "stage" in values:
            labels = {code: label for label, code in self._vocabulary.stage_codes.items()}
            values["stage"] = labels.get(values["stage"], values["stage"])
        currency = row.get("transactioncurrencyid")
        if isinstance(currency, dict) and currency.get("isocurrencycode"):
            values["currency"] = currency["isocurrencycode"]
        return values

    def _select(self, kind: TargetKind) -> tuple[tuple[str, ...], str | None]:
        match kind:
            case "opportunity":
                return (
                    ("opportunityid", *self._columns().values(), self._config.key_column),
                    "transactioncurrencyid($select=isocurrencycode)",
                )
            case "account":
                return ("accountid", "name"), None
            case "contact":
                return ("contactid", "fullname", "emailaddress1", "jobtitle", "_parentcustomerid_value"), None
            case _:
                assert_never(kind)

    def _record(self, kind: TargetKind, row: dict[str, Any]) -> CrmRecord:
        version = version_of(row.get("@odata.etag"))
        match kind:
            case "opportunity":
                values = self.opportunity_values(row)
            case "account":
                values = {"id": row.get("accountid"), "name": row.get("name"), "version": version}
            case "contact":
                values = {
                    "id": row.get("contactid"),
                    "name": row.get("fullname"),
                    "email": row.get("emailaddress1"),
                    "title": row.get("jobtitle"),
                    "account_id": row.get("_parentcustomerid_value"),
                    "version": version,
                }
            case _:
                assert_never(kind)
        # Dataverse does not say what the rep may do with a row: its security roles decide at
        # the write itself (403, answered as permission_denied), so access stays unknown.
        return CrmRecord(
            kind=kind,
            id=str(values.get("id") or ""),
            name=str(values.get("name") or ""),
            version=version,
            values=values,
        )

    async def _row(self, kind: TargetKind, record_id: str) -> dict[str, Any]:
        select, expand = self._select(kind)
        return await self.get_row(f"{self._config.entity_set(kind)}({record_id})", select, expand)

    async def read(self, kind: TargetKind, record_id: str) -> CrmRecord:
        """``GET /<set>(<id>)``: the row, its ETag as the version."""
        return self._record(kind, await self._row(kind, record_id))

    # --- activities ----------------------------------------------------------------------------

    def _table(self, activity_type: str) -> str:
        table = self._config.activity_tables.get(activity_type)
        if table is None:
            raise CrmCallError(
                "validation",
                f"this CRM does not log {activity_type!r} activities "
                f"(it logs {', '.join(self._config.activity_tables)})",
            )
        return table

    def _activity_select(self) -> tuple[str, ...]:
        return (
            "activityid",
            "subject",
            "description",
            "scheduledend",
            "statecode",
            "statuscode",
            "_regardingobjectid_value",
            self._config.key_column,
        )

    def _activity(
        self, activity_type: str, row: dict[str, Any], contact_ids: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        state = {0: "open", 1: "completed", 2: "canceled"}.get(row.get("statecode", 0), "open")
        activity: dict[str, Any] = {
            "id": row.get("activityid"),
            "type": activity_type,
            "subject": row.get("subject"),
            "notes": row.get("description") or "",
            "due": row.get("scheduledend"),
            "regarding_id": row.get("_regardingobjectid_value"),
            "state": state,
            "version": version_of(row.get("@odata.etag")),
            "contacts": [{"id": contact} for contact in contact_ids],
        }
        if self._config.activity_tables.get(activity_type) == "task" and row.get("scheduledend"):
            activity["due_date"] = str(row["scheduledend"])[:10]
        return activity

    @staticmethod
    def _regarding(request: ActivityRequest, table: str) -> tuple[str, str | None]:
        """What the activity regards: the deal, else (a task naming one contact) that contact,
        else the account. A task has no activity parties in Dataverse: the one person it is
        about is what it regards, and the contact's account is implied by it."""
        if request.opportunity_id:
            return "opportunity", request.opportunity_id
        if table == "task" and len(request.contact_ids) == 1:
            return "contact", request.contact_ids[0]
        return "account", request.account_id

    def _activity_body(self, request: ActivityRequest, table: str) -> dict[str, Any]:
        body: dict[str, Any] = {"subject": request.subject, "description": request.notes}
        regarding = self._regarding(request, table)
        if table not in _PARTY_MASK and request.contact_ids and regarding[0] != "contact":
            raise CrmCallError(
                "validation",
                f"a Dynamics 365 {table} names no participants: it can regard one contact, or the deal,"
                " not both; nothing was written",
            )
        if regarding[1]:
            body[f"regardingobjectid_{regarding[0]}_{table}@odata.bind"] = (
                f"/{self._config.entity_set(regarding[0])}({regarding[1]})"
            )
        when = (request.occurred_at or dt.datetime.now(dt.UTC)).isoformat()
        if table == "appointment":
            # An appointment needs its start and end; a logged meeting is the moment it happened.
            body["scheduledstart"] = body["scheduledend"] = when
        elif table == "phonecall":
            body["actualend"] = when
        if table == "task" and request.due is not None:
            body["scheduledend"] = dt.datetime.combine(request.due, dt.time(), dt.UTC).isoformat()
        mask = _PARTY_MASK.get(table)
        if mask is not None and request.contact_ids:
            contacts = self._config.entity_set("contact")
            body[f"{table}_activity_parties"] = [
                {"partyid_contact@odata.bind": f"/{contacts}({contact})", "participationtypemask": mask}
                for contact in request.contact_ids
            ]
        return body

    def _by_key(self, table: str, key: str) -> str:
        return f"{self._config.entity_set(table)}({self._config.key_column}={_key_literal(key)})"

    async def create_activity(self, request: ActivityRequest) -> ActivityResult:
        """A create-only upsert on the key column; an existing key returns the stored row."""
        table = self._table(request.type)
        path = self._by_key(table, request.key)
        response = await self.send(
            "PATCH",
            path,
            params={"$select": ",".join(self._activity_select())},
            body=self._activity_body(request, table),
            headers={"If-None-Match": "*", "Prefer": "return=representation"},
        )
        if response.status_code in (200, 201):
            return ActivityResult(
                activity=self._activity(request.type, response.json(), request.contact_ids),
                created=response.status_code == 201,
            )
        if response.status_code == 204:
            # The server ignored return=representation: it created the row (OData-EntityId).
            row = await self.get_row(path, self._activity_select())
            return ActivityResult(
                activity=self._activity(request.type, row, request.contact_ids), created=True
            )
        code, _ = _error_of(response)
        if response.status_code == 412 and code != CONCURRENCY_MISMATCH:
            # "A record with matching key values already exists": an earlier attempt created it.
            found = await self.find_activity(request.key, request.type)
            if found is not None:
                return found
        raise refusal(response, writing=True)

    async def find_activity(self, key: str, activity_type: str) -> ActivityResult | None:
        """``GET /<set>(<keycolumn>='<key>')``: the activity created under the key, if any."""
        response = await self.send(
            "GET",
            self._by_key(self._table(activity_type), key),
            params={"$select": ",".join(self._activity_select())},
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise refusal(response)
        return ActivityResult(activity=self._activity(activity_type, response.json()), created=False)

    async def void_activity(self, activity: ActivityRef, reason: str) -> dict[str, Any]:
        """Cancel it (``statecode`` 2 and the table's Canceled ``statuscode``); a canceled one is
        returned as is. Dataverse keeps no cancel reason; the copilot's audit row holds it."""
        if activity.type is None:
            raise CrmCallError("validation", "the activity's type is not known, so it cannot be voided")
        table = self._table(activity.type)
        path = f"{self._config.entity_set(table)}({activity.id})"
        select = self._activity_select()
        current = await self.get_row(path, select)
        if current.get("statecode") == CANCELED_STATE:
            return self._activity(activity.type, current)
        status = self._config.canceled_status.get(table)
        if status is None:
            raise CrmCallError("validation", f"no Canceled status is configured for {table}")
        response = await self.send(
            "PATCH",
            path,
            params={"$select": ",".join(select)},
            body={"statecode": CANCELED_STATE, "statuscode": status},
            # If-Match: * so a PATCH never creates a row that is gone (404 instead).
            headers={"If-Match": "*", "Prefer": "return=representation"},
        )
        if response.status_code == 200:
            return self._activity(activity.type, response.json())
        if response.status_code == 204:
            return self._activity(activity.type, await self.get_row(path, select))
        raise refusal(response, writing=True)

    # --- opportunities -------------------------------------------------------------------------

    def _update_body(self, request: OpportunityUpdate) -> dict[str, Any]:
        columns = self._columns()
        body: dict[str, Any] = {}
        for name, value in request.changes.items():
            if name not in EDITABLE_OPPORTUNITY_FIELDS or name not in self._vocabulary.opportunity_fields:
                raise CrmCallError("validation", f"this CRM does not let the copilot change {name!r}")
            if name == "stage" and self._vocabulary.stage_codes:
                if value not in self._vocabulary.stage_codes:
                    raise CrmCallError("validation", f"unknown stage {value!r}")
                value = self._vocabulary.stage_codes[value]
            body[columns[name]] = value
        # The key of this write, so a later attempt can tell its own applied update (a 412
        # after a lost answer, a crash after the commit) from someone else's change.
        body[self._config.key_column] = request.key
        return body

    async def update_opportunity(self, request: OpportunityUpdate) -> Updated | Conflict:
        """``PATCH`` under ``If-Match``; 412 is a conflict with the current values, unless the
        row carries this write's key (then it is this write, already applied)."""
        path = f"{self._config.entity_set('opportunity')}({request.opportunity_id})"
        select, expand = self._select("opportunity")
        response = await self.send(
            "PATCH",
            path,
            params={"$select": ",".join(select)},
            body=self._update_body(request),
            headers={"If-Match": etag_for(request.expected_version), "Prefer": "return=representation"},
        )
        if response.status_code == 200:
            # The row as written (return=representation; $expand is ignored on a PATCH, so the
            # currency is the caller's, from its read).
            return Updated(opportunity=self.opportunity_values(response.json()), previous=request.previous)
        if response.status_code == 204:
            row = await self.get_row(path, select, expand)
            return Updated(opportunity=self.opportunity_values(row), previous=request.previous)
        code, _ = _error_of(response)
        if response.status_code == 412 and code in (CONCURRENCY_MISMATCH, ""):
            row = await self.get_row(path, select, expand)
            values = self.opportunity_values(row)
            if row.get(self._config.key_column) == request.key:
                return Updated(opportunity=values, replayed=True)
            return Conflict(current=values)
        raise refusal(response, writing=True)

    async def find_update(self, key: str, opportunity_id: str) -> Updated | None:
        """The opportunity if its last copilot write is ``key`` (that attempt applied)."""
        select, expand = self._select("opportunity")
        row = await self.get_row(
            f"{self._config.entity_set('opportunity')}({opportunity_id})", select, expand
        )
        if row.get(self._config.key_column) != key:
            return None
        return Updated(opportunity=self.opportunity_values(row), replayed=True)


# --- vocabulary ------------------------------------------------------------------------------------


def _label(option: dict[str, Any]) -> str | None:
    label = option.get("Label") or {}
    localized = label.get("UserLocalizedLabel") or {}
    text = localized.get("Label")
    if not text:
        labels = label.get("LocalizedLabels") or []
        text = labels[0].get("Label") if labels and isinstance(labels[0], dict) else None
    return str(text) if text else None


async def load_vocabulary(
    config: DataverseConfig, token: TokenSource, *, transport: httpx.AsyncBaseTransport | None = None
) -> Vocabulary:
    """The environment's stages (the stage column's option set) and the opportunity columns the
    copilot may change (``IsValidForUpdate``), from its metadata; the activity types are the
    configured activity tables'. Where the metadata says nothing, Dataverse's defaults."""
    reader = DataverseWriter(
        config, token, Vocabulary(stages=("-",), activity_types=("-",)), transport=transport
    )
    entity = "EntityDefinitions(LogicalName='opportunity')"
    picklist = (
        f"{entity}/Attributes(LogicalName='{config.stage_attribute}')"
        "/Microsoft.Dynamics.CRM.PicklistAttributeMetadata"
    )
    sources: list[str] = []
    stage_codes = dict(DEFAULT_STAGE_CODES)
    response = await reader.send(
        "GET", picklist, params={"$select": "LogicalName", "$expand": "OptionSet($select=Options)"}
    )
    if response.status_code == 200:
        options = ((response.json().get("OptionSet") or {}).get("Options")) or []
        read = {
            label: int(option["Value"])
            for option in options
            if isinstance(option, dict) and isinstance(option.get("Value"), int) and (label := _label(option))
        }
        if read:
            stage_codes = read
            sources.append(f"{config.stage_attribute} option set")
    elif response.status_code not in (403, 404):
        raise refusal(response)
    editable = EDITABLE_OPPORTUNITY_FIELDS
    response = await reader.send(
        "GET", f"{entity}/Attributes", params={"$select": "LogicalName,IsValidForUpdate"}
    )
    if response.status_code == 200:
        updatable = {
            a.get("LogicalName")
            for a in response.json().get("value") or []
            if a.get("IsValidForUpdate") is True
        }
        if updatable:
            columns = {**config.opportunity_columns, "stage": config.stage_attribute}
            editable = tuple(f for f in EDITABLE_OPPORTUNITY_FIELDS if columns[f] in updatable)
            sources.append("opportunity attributes")
    elif response.status_code not in (403, 404):
        raise refusal(response)
    return Vocabulary(
        stages=tuple(stage_codes),
        stage_codes=stage_codes,
        activity_types=tuple(config.activity_tables) or ("call",),
        opportunity_fields=editable,
        source=", ".join(sources) or "fallback (Dataverse defaults)",
    )
