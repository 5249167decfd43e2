"""Preparing a Dataverse environment for the copilot, and reading back whether it is prepared.

What the ``dataverse`` connector needs of an environment that no rep can create:

* the key column (``CRM_DATAVERSE_KEY_COLUMN``, a string column) on each activity table the
  copilot logs to and on ``opportunity``, and an alternate key over it on each activity table
  (the writer's create-only upsert ``PATCH /phonecalls(<keycolumn>='<key>')`` needs that key);
* the copilot's app (its client id) as an enabled row of ``allowedmcpclients``, so its reps'
  tokens are accepted on ``/api/mcp``.

:class:`DataverseAdmin` does both through the Web API's metadata endpoints
(``EntityDefinitions(LogicalName='<t>')/Attributes`` and ``.../Keys``) and the
``allowedmcpclients`` table, with a delegated token: reads work with any user's token (the
doctor uses a rep's), creates need a System Administrator's. :func:`prepare` is
``python -m copilot crm prepare``: idempotent, it creates only what is missing.
"""

from __future__ import annotations

import ssl
from functools import cache
from typing import Any, Final, Literal
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from copilot.crm.dataverse import API_PATH
from copilot.errors import CrmCallError, CrmUnavailable, InvalidInput
from copilot.settings import Settings

KEY_COLUMN_MAX_LENGTH: Final = 100
"""The key column's length: the copilot's write keys are far shorter (a hash and a prefix)."""
OPPORTUNITY: Final = "opportunity"
_HEADERS: Final = {"Accept": "application/json", "OData-MaxVersion": "4.0", "OData-Version": "4.0"}
_TRANSIENT: Final = frozenset({408, 429, 500, 502, 503, 504})

Action = Literal["created", "exists", "enabled"]


class PrepareStep(BaseModel):
    """One thing ``crm prepare`` made sure of."""

    table: str | None
    """The table (None for the allowed-MCP-client row)."""
    what: Literal["key_column", "alternate_key", "allowed_mcp_client"]
    name: str
    """The column's or key's logical name, or the client app id."""
    action: Action


class PrepareReport(BaseModel):
    """``crm prepare --json``: the environment and each step, in order."""

    crm_url: str
    key_column: str
    steps: list[PrepareStep]

    @property
    def changed(self) -> int:
        return sum(1 for s in self.steps if s.action != "exists")


class KeyState(BaseModel):
    """One table's alternate keys over the key column, as the metadata reports them."""

    table: str
    status: str | None
    """``EntityKeyIndexStatus`` (``Active``, ``Pending``, ``InProgress``, ``Failed``); None = no key."""


@cache
def _trust(ca_file: str | None) -> ssl.SSLContext:
    # The system's trust plus, when one is set, the private CA (a sandbox or a TLS-inspecting
    # proxy): a public Dataverse host stays verifiable when ENTRA_CA_BUNDLE names a private one.
    context = httpx.create_ssl_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    return context


def crm_trust(settings: Settings) -> ssl.SSLContext:
    """The TLS trust for the Dataverse environment's host: ``CRM_CA_BUNDLE`` (what the runtime
    trusts the CRM with), else ``ENTRA_CA_BUNDLE``, on top of the system's."""
    if settings.crm_ca_file is not None:
        return _trust(settings.crm_ca_file)
    return _trust(str(settings.ca_bundle) if settings.ca_bundle is not None else None)


def key_tables(settings: Settings) -> tuple[list[str], list[str]]:
    """(tables that need the key column, tables that also need the alternate key over it)."""
    activities = list(dict.fromkeys(settings.crm_dataverse_activity_tables.values()))
    return [*activities, OPPORTUNITY], activities


def _label(text: str) -> dict[str, Any]:
    return {
        "@odata.type": "Microsoft.Dynamics.CRM.Label",
        "LocalizedLabels": [
            {"@odata.type": "Microsoft.Dynamics.CRM.LocalizedLabel", "Label": text, "LanguageCode": 1033}
        ],
    }


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", {})
        return str(error.get("message") or response.text[:200])
    except (ValueError, AttributeError):
        return response.text[:200]


class DataverseAdmin:
    """The environment's metadata and allowed MCP clients, through the Web API, as the token's user."""

    def __init__(
        self, settings: Settings, token: str, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        if settings.crm_kind != "dataverse" or settings.crm_url is None:
            raise InvalidInput("this needs CRM_KIND=dataverse and CRM_URL (the environment's URL)")
        self.settings = settings
        self.base_url = settings.crm_url.rstrip("/") + API_PATH
        self.key_column = settings.crm_dataverse_key_column
        self._token = token
        self._transport = transport

    async def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        headers = {**_HEADERS, "Authorization": f"Bearer {self._token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with httpx.AsyncClient(
                verify=crm_trust(self.settings),
                transport=self._transport,
                timeout=self.settings.crm_timeout_seconds,
            ) as client:
                response = await client.request(method, f"{self.base_url}/{path}", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise CrmUnavailable(
                f"the Dataverse Web API at {self.base_url} is unreachable: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code in _TRANSIENT:
            raise CrmUnavailable(
                f"the Dataverse Web API answered HTTP {response.status_code}: {_error_text(response)}"
            )
        if response.status_code in (401, 403):
            who = (
                "the token was refused" if response.status_code == 401 else "the token's user may not do this"
            )
            raise CrmCallError(
                "permission_denied",
                f"{method} {path.split('?')[0]}: HTTP {response.status_code}, {who}: {_error_text(response)}",
                {"status": response.status_code},
            )
        return response

    def _ok(self, response: httpx.Response, what: str) -> None:
        if not response.is_success:
            raise CrmCallError("validation", f"{what}: HTTP {response.status_code}: {_error_text(response)}")

    # --- reads ---------------------------------------------------------------------------------

    async def has_column(self, table: str) -> bool:
        """Whether ``table`` has the key column (its attribute metadata exists)."""
        response = await self._send(
            "GET",
            f"EntityDefinitions(LogicalName='{table}')/Attributes(LogicalName='{self.key_column}')"
            "?$select=LogicalName,AttributeType",
        )
        if response.status_code == 404:
            return False
        self._ok(response, f"reading {table}.{self.key_column}")
        return True

    async def key_status(self, table: str) -> KeyState:
        """The status of ``table``'s alternate key over exactly the key column, if there is one."""
        response = await self._send(
            "GET",
            f"EntityDefinitions(LogicalName='{table}')/Keys"
            "?$select=LogicalName,KeyAttributes,EntityKeyIndexStatus",
        )
        self._ok(response, f"reading {table}'s alternate keys")
        for key in response.json().get("value", []):
            if key.get("KeyAttributes") == [self.key_column]:
                return KeyState(table=table, status=str(key.get("EntityKeyIndexStatus") or "Active"))
        return KeyState(table=table, status=None)

    async def mcp_client(self, app_id: str) -> dict[str, Any] | None:
        """The ``allowedmcpclient`` row of ``app_id``, if there is one."""
        literal = quote(app_id.replace("'", "''"), safe="")
        response = await self._send("GET", f"allowedmcpclients?$filter=applicationid eq '{literal}'")
        self._ok(response, "reading allowedmcpclients")
        rows: list[dict[str, Any]] = response.json().get("value", [])
        return rows[0] if rows else None

    # --- creates -------------------------------------------------------------------------------

    async def create_column(self, table: str) -> None:
        """Create the key column on ``table`` (a plain string column, not required)."""
        body = {
            "@odata.type": "Microsoft.Dynamics.CRM.StringAttributeMetadata",
            "AttributeType": "String",
            "AttributeTypeName": {"Value": "StringType"},
            "SchemaName": self.key_column,
            "MaxLength": KEY_COLUMN_MAX_LENGTH,
            "FormatName": {"Value": "Text"},
            "RequiredLevel": {"Value": "None"},
            "DisplayName": _label("Copilot key"),
            "Description": _label(
                "The sales copilot's idempotency key of the write that made or last changed this row."
            ),
        }
        response = await self._send("POST", f"EntityDefinitions(LogicalName='{table}')/Attributes", body)
        self._ok(response, f"creating {table}.{self.key_column}")

    async def create_key(self, table: str) -> None:
        """Create the alternate key over the key column on ``table``."""
        body = {
            "SchemaName": f"{self.key_column}_key",
            "DisplayName": _label("Copilot key"),
            "KeyAttributes": [self.key_column],
        }
        response = await self._send("POST", f"EntityDefinitions(LogicalName='{table}')/Keys", body)
        self._ok(response, f"creating {table}'s alternate key over {self.key_column}")

    async def allow_mcp_client(self, app_id: str) -> Action:
        """Make ``app_id`` an enabled allowed MCP client: add its row, or switch it on."""
        row = await self.mcp_client(app_id)
        if row is not None and row.get("isenabled") is True:
            return "exists"
        if row is not None:
            response = await self._send(
                "PATCH", f"allowedmcpclients({row['allowedmcpclientid']})", {"isenabled": True}
            )
            self._ok(response, f"enabling the allowed MCP client {app_id}")
            return "enabled"
        body = {
            "applicationid": app_id,
            "name": "Sales copilot",
            "uniquename": f"new_salescopilot_{app_id.replace('-', '')}",
            "isenabled": True,
        }
        response = await self._send("POST", "allowedmcpclients", body)
        self._ok(response, f"adding the allowed MCP client {app_id}")
        return "created"


async def prepare(
    settings: Settings,
    token: str,
    *,
    allow_mcp_client: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> PrepareReport:
    """Create what is missing: the key column, its alternate keys, and (when asked) the
    allowed-MCP-client row. Anything already there is left as it is (``exists``)."""
    admin = DataverseAdmin(settings, token, transport=transport)
    column_tables, key_tables_ = key_tables(settings)
    steps: list[PrepareStep] = []
    for table in column_tables:
        action: Action = "exists"
        if not await admin.has_column(table):
            await admin.create_column(table)
            action = "created"
        steps.append(PrepareStep(table=table, what="key_column", name=admin.key_column, action=action))
    for table in key_tables_:
        action = "exists"
        if (await admin.key_status(table)).status is None:
            await admin.create_key(table)
            action = "created"
        steps.append(
            PrepareStep(table=table, what="alternate_key", name=f"{admin.key_column}_key", action=action)
        )
    if allow_mcp_client is not None:
        action = await admin.allow_mcp_client(allow_mcp_client)
        steps.append(PrepareStep(table=None, what="allowed_mcp_client", name=allow_mcp_client, action=action))
    assert settings.crm_url is not None
    return PrepareReport(crm_url=settings.crm_url, key_column=admin.key_column, steps=steps)
