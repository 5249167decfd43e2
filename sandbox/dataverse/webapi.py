"""``/api/data/v9.2/``: the Dataverse Web API subset, as Starlette routes.

Resource paths (parsed here, not by the router, because OData keys live in parentheses):
``<set>``, ``<set>(<guid>)``, ``<set>(<altkey>='<value>')``, ``EntityDefinitions...`` and
``WhoAmI``. Links (``@odata.nextLink``, ``OData-EntityId``) use the base URL the request
came in on, so they work on the HTTP and the HTTPS listener alike.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.config import SandboxSettings
from sandbox.dataverse import metadata, odata
from sandbox.dataverse.errors import DataverseError, bad_request, duplicate_key
from sandbox.dataverse.ids import guid_for, parse_guid
from sandbox.dataverse.org import OrgConfig
from sandbox.dataverse.records import DataverseService, Snapshot, currency_row
from sandbox.dataverse.schema import Entity, by_set
from sandbox.dataverse.security import authenticate, charge
from sandbox.directory import User
from sandbox.knobs import KnobState

API_PREFIX = "/api/data/v9.2/"
ODATA_HEADERS = {"OData-Version": "4.0"}
_RESOURCE = re.compile(r"^(?P<set>[A-Za-z_]+)(?:\((?P<key>[^)]*)\))?$")
ALLOWED_MCP_CLIENTS = "allowedmcpclients"
_TARGET = re.compile(r"(?P<set>[A-Za-z_]+)\((?P<key>[^)]*)\)$")
_CLIENT_FILTER = re.compile(r"^applicationid eq '([^']{1,100})'$")


def error_response(exc: DataverseError) -> JSONResponse:
    """Dataverse's error body with its status and headers (e.g. ``Retry-After``)."""
    return JSONResponse(exc.payload(), status_code=exc.status, headers={**ODATA_HEADERS, **exc.headers})


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, default=str),
        status_code=status,
        media_type="application/json; odata.metadata=minimal",
        headers={**ODATA_HEADERS, **(headers or {})},
    )


class _Key:
    """A parsed entity key: a GUID or one alternate-key value."""

    def __init__(self, guid: str | None = None, alternate: str | None = None) -> None:
        self.guid = guid
        self.alternate = alternate


def _parse_key(entity: Entity, text: str, org: OrgConfig) -> _Key:
    guid = parse_guid(text)
    if guid is not None:
        return _Key(guid=guid)
    name, eq, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if eq and name == entity.primary_id and parse_guid(value):
        return _Key(guid=parse_guid(value))
    if eq and name == entity.alternate_key and len(value) >= 2 and value[0] == value[-1] == "'":
        if not org.has_key(entity.logical_name):
            # Until an admin creates the alternate key, the column names no key of the table.
            raise bad_request(
                f"The key attribute {name} is not an alternate key of {entity.logical_name}: no entity"
                " key over it exists."
            )
        return _Key(alternate=value[1:-1].replace("''", "'"))
    raise bad_request(
        f"The key '{text}' is not valid for {entity.logical_name}: use a GUID"
        + (f" or {entity.alternate_key}='<value>'." if entity.alternate_key else ".")
    )


class WebApi:
    """The Web API's request handling; one instance per app."""

    def __init__(
        self, settings: SandboxSettings, knobs: KnobState, service: DataverseService, org: OrgConfig
    ) -> None:
        self.settings = settings
        self.knobs = knobs
        self.service = service
        self.org = org
        self.sets = by_set(service.key_column)

    def routes(self) -> list[Route]:
        """One catch-all route: OData paths are parsed by :meth:`dispatch`."""
        return [
            Route(
                API_PREFIX + "{path:path}",
                self.handle,
                methods=["GET", "POST", "PATCH", "DELETE"],
            )
        ]

    async def handle(self, request: Request) -> Response:
        """Authenticate, charge the budget, dispatch; every refusal in Dataverse's shape."""
        try:
            claims = await authenticate(self.settings, request.headers.get("authorization"), "webapi")
            charge(self.knobs, claims)
            return await self.dispatch(request, claims.user)
        except DataverseError as exc:
            return error_response(exc)

    def base(self, request: Request) -> str:
        """The service root URL as the caller reached it."""
        return str(request.base_url).rstrip("/") + API_PREFIX

    async def dispatch(self, request: Request, caller: User) -> Response:
        """Route one request by its OData resource path and method."""
        path = request.path_params["path"].strip("/")
        params = dict(request.query_params)
        method = request.method
        if path == "":
            return _json(
                {
                    "@odata.context": f"{self.base(request)}$metadata",
                    "value": [{"name": s, "kind": "EntitySet", "url": s} for s in self.sets],
                }
            )
        if path in ("WhoAmI", "WhoAmI()"):
            return _json(
                {
                    "@odata.context": f"{self.base(request)}$metadata#Microsoft.Dynamics.CRM.WhoAmIResponse",
                    "BusinessUnitId": guid_for("businessunit", caller.tenant_id),
                    "UserId": guid_for("systemuser", caller.id),
                    "OrganizationId": guid_for("organization", caller.tenant_id),
                }
            )
        if path.startswith("RetrieveRecordChangeHistory("):
            return await self._change_history(request, caller, path, params)
        if path.startswith("EntityDefinitions"):
            if method == "POST":
                body = await self._body(request)
                created = metadata.create(self.service.tables, self.org, caller, path.split("/"), body)
                return Response(
                    status_code=204,
                    headers={**ODATA_HEADERS, "OData-EntityId": f"{self.base(request)}{created}"},
                )
            if method != "GET":
                raise DataverseError(405, "0x80060888", f"{method} is not supported on metadata here.")
            return _json(metadata.resolve(self.service.tables, self.org, path.split("/"), params))
        if path.startswith(ALLOWED_MCP_CLIENTS):
            return await self._allowed_mcp_clients(request, caller, path, params)
        match = _RESOURCE.match(path)
        entity = self.sets.get(match.group("set")) if match else None
        if match is None or entity is None:
            raise DataverseError(
                404, "0x80060888", f"Resource not found for the segment '{path.split('/')[0]}'."
            )
        key_text = match.group("key")
        if key_text is None:
            if method == "GET":
                return await self._query(request, caller, entity, params)
            if method == "POST":
                return await self._create(request, caller, entity, params)
            raise DataverseError(405, "0x80060888", f"{method} is not supported on a collection.")
        key = _parse_key(entity, key_text, self.org)
        if method == "GET":
            return await self._retrieve(request, caller, entity, key, params)
        if method == "PATCH":
            return await self._patch(request, caller, entity, key, params)
        if method == "DELETE":
            if key.guid is None:
                raise bad_request("Delete a row by its GUID.")
            guid = key.guid
            await anyio.to_thread.run_sync(
                lambda: self.service.delete(
                    caller, entity.logical_name, guid, if_match=request.headers.get("if-match")
                )
            )
            return Response(status_code=204, headers=ODATA_HEADERS)
        raise DataverseError(405, "0x80060888", f"{method} is not supported on a single row.")

    # --- RetrieveRecordChangeHistory ------------------------------------------------------

    async def _change_history(
        self, request: Request, caller: User, path: str, params: dict[str, str]
    ) -> Response:
        """``GET RetrieveRecordChangeHistory(Target=@t)?@t={'@odata.id':'<set>(<guid>)'}``."""
        if request.method != "GET":
            raise DataverseError(405, "0x80060888", "RetrieveRecordChangeHistory is a function: use GET.")
        inside = path[len("RetrieveRecordChangeHistory(") :].rstrip(")")
        name, _, alias = inside.partition("=")
        raw = params.get(alias.strip()) if alias.strip().startswith("@") else alias
        if name.strip() != "Target" or not raw:
            raise bad_request("RetrieveRecordChangeHistory needs its Target parameter.")
        try:
            target = json.loads(raw.replace("'", '"'))
        except ValueError:
            target = None
        odata_id = target.get("@odata.id") if isinstance(target, dict) else None
        found = _TARGET.search(odata_id) if isinstance(odata_id, str) else None
        entity = self.sets.get(found.group("set")) if found else None
        guid = parse_guid(found.group("key")) if found else None
        if entity is None or guid is None:
            raise bad_request("Target must be {'@odata.id':'<entityset>(<guid>)'}.")
        logical = entity.logical_name
        details = await anyio.to_thread.run_sync(lambda: self.service.change_history(caller, logical, guid))
        return _json(
            {
                "@odata.context": f"{self.base(request)}$metadata"
                "#Microsoft.Dynamics.CRM.RetrieveRecordChangeHistoryResponse",
                "AuditDetailCollection": {
                    "MoreRecords": False,
                    "PagingCookie": "",
                    "TotalRecordCount": len(details),
                    "AuditDetails": details,
                },
            }
        )

    # --- allowedmcpclients ----------------------------------------------------------------

    async def _allowed_mcp_clients(
        self, request: Request, caller: User, path: str, params: dict[str, str]
    ) -> Response:
        """The ``allowedmcpclient`` table: list (``$filter=applicationid eq '<id>'`` only), create
        and ``PATCH`` by id; see :class:`~sandbox.dataverse.org.OrgConfig`."""
        match = _RESOURCE.match(path)
        if match is None or match.group("set") != ALLOWED_MCP_CLIENTS:
            raise DataverseError(404, "0x80060888", f"Resource not found for the segment '{path}'.")
        key = match.group("key")
        if key is None and request.method == "GET":
            rows = self.org.clients(caller)
            wanted = params.get("$filter")
            if wanted is not None:
                found = _CLIENT_FILTER.match(wanted.strip())
                if found is None:
                    raise bad_request("Filter allowedmcpclients by applicationid eq '<id>' only.")
                rows = [r for r in rows if r["applicationid"].lower() == found.group(1).lower()]
            return _json(
                {"@odata.context": f"{self.base(request)}$metadata#{ALLOWED_MCP_CLIENTS}", "value": rows}
            )
        if key is None and request.method == "POST":
            row = self.org.create_client(caller, await self._body(request))
        elif key is not None and request.method == "PATCH":
            row_id = parse_guid(key)
            if row_id is None:
                raise bad_request(f"The key '{key}' is not a GUID.")
            row = self.org.update_client(caller, row_id, await self._body(request))
        else:
            raise DataverseError(405, "0x80060888", f"{request.method} is not supported here.")
        entity_id = f"{self.base(request)}{ALLOWED_MCP_CLIENTS}({row['allowedmcpclientid']})"
        return Response(status_code=204, headers={**ODATA_HEADERS, "OData-EntityId": entity_id})

    # --- reads ---------------------------------------------------------------------------

    async def _query(
        self, request: Request, caller: User, entity: Entity, params: dict[str, str]
    ) -> Response:
        options = odata.parse_query(params, entity)
        snap = await anyio.to_thread.run_sync(self.service.snapshot, caller)
        rows = odata.filter_and_sort(snap.rows(entity.logical_name), options)
        total = len(rows)
        size = odata.page_size(request.headers.get("prefer"))
        body: dict[str, Any] = {"@odata.context": f"{self.base(request)}$metadata#{entity.set_name}"}
        if options.count:
            body["@odata.count"] = total
        if size is not None:
            # With maxpagesize, $top is ignored (reference §3.2).
            page = rows[options.offset : options.offset + size]
            if options.offset + size < total:
                query = {k: v for k, v in params.items() if k != "$skiptoken"}
                query["$skiptoken"] = odata.encode_skiptoken(options.offset + size)
                body["@odata.nextLink"] = f"{self.base(request)}{entity.set_name}?{urlencode(query)}"
        else:
            page = rows[: options.top if options.top is not None else odata.MAX_PAGE_SIZE]
        body["value"] = [self._shape(snap, entity, row, options) for row in page]
        return _json(body)

    async def _retrieve(
        self, request: Request, caller: User, entity: Entity, key: _Key, params: dict[str, str]
    ) -> Response:
        options = odata.parse_query({k: v for k, v in params.items() if k in ("$select", "$expand")}, entity)
        if key.guid is not None:
            guid = key.guid
            row, snap = await anyio.to_thread.run_sync(
                lambda: self.service.get(caller, entity.logical_name, guid)
            )
        else:
            alternate = key.alternate or ""
            row, snap = await anyio.to_thread.run_sync(
                lambda: self.service.get_by_key(caller, entity.logical_name, alternate)
            )
        if_none_match = request.headers.get("if-none-match")
        # Never 304 with $expand: the expanded rows have ETags of their own (reference §3.4).
        if if_none_match and if_none_match == row["@odata.etag"] and not options.expand:
            return Response(status_code=304, headers={**ODATA_HEADERS, "ETag": row["@odata.etag"]})
        body = {
            "@odata.context": f"{self.base(request)}$metadata#{entity.set_name}/$entity",
            **self._shape(snap, entity, row, options),
        }
        return _json(body, headers={"ETag": row["@odata.etag"]})

    def _shape(
        self, snap: Snapshot, entity: Entity, row: dict[str, Any], options: odata.QueryOptions
    ) -> dict[str, Any]:
        shaped = odata.project(row, options.select, entity.primary_id)
        for item in options.expand:
            if item.navigation == entity.parties_property:
                shaped[item.navigation] = [
                    odata.project(party, item.select, "activitypartyid")
                    for party in snap.parties_of(entity.logical_name, row[entity.primary_id])
                ]
                continue
            nav = entity.nav(item.navigation)
            assert nav is not None
            column = entity.column(nav.column)
            assert column is not None
            target_guid = row.get(column.row_key)
            if nav.target == "transactioncurrency":
                # Currencies are organisation-owned reference rows every user may read.
                currency = currency_row(str(target_guid)) if target_guid else None
                shaped[nav.name] = (
                    None
                    if currency is None
                    else odata.project(currency, item.select, "transactioncurrencyid")
                )
                continue
            kind = row.get(f"{column.row_key}@Microsoft.Dynamics.CRM.lookuplogicalname", nav.target)
            target_row = snap.visible(nav.target, target_guid) if target_guid and kind == nav.target else None
            if target_row is None:
                shaped[nav.name] = None
                continue
            target = self.service.tables[nav.target]
            select = tuple(odata.column_key(target, s) for s in item.select)
            shaped[nav.name] = odata.project(target_row, select, target.primary_id)
        return shaped

    # --- writes --------------------------------------------------------------------------

    async def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError as exc:
            raise bad_request("The request body is not valid JSON.") from exc
        if not isinstance(body, dict):
            raise bad_request("The request body must be a JSON object.")
        return body

    def _written(
        self, request: Request, entity: Entity, row: dict[str, Any], params: dict[str, str], created: bool
    ) -> Response:
        entity_id = f"{self.base(request)}{entity.set_name}({row[entity.primary_id]})"
        headers = {"OData-EntityId": entity_id, "ETag": row["@odata.etag"]}
        if odata.prefers(request.headers.get("prefer"), "return=representation"):
            options = odata.parse_query({k: v for k, v in params.items() if k == "$select"}, entity)
            body = {
                "@odata.context": f"{self.base(request)}$metadata#{entity.set_name}/$entity",
                **odata.project(row, options.select, entity.primary_id),
            }
            headers["Preference-Applied"] = "return=representation"
            return _json(body, 201 if created else 200, headers)
        return Response(status_code=204, headers={**ODATA_HEADERS, **headers})

    async def _create(
        self, request: Request, caller: User, entity: Entity, params: dict[str, str]
    ) -> Response:
        body = await self._body(request)
        row = await anyio.to_thread.run_sync(lambda: self.service.create(caller, entity.logical_name, body))
        return self._written(request, entity, row, params, created=True)

    async def _patch(
        self, request: Request, caller: User, entity: Entity, key: _Key, params: dict[str, str]
    ) -> Response:
        body = await self._body(request)
        if_match = request.headers.get("if-match")
        if_none_match = request.headers.get("if-none-match")
        if key.alternate is not None:
            alternate = key.alternate
            row, created = await anyio.to_thread.run_sync(
                lambda: self.service.upsert_by_key(
                    caller,
                    entity.logical_name,
                    alternate,
                    body,
                    if_match=if_match,
                    if_none_match=if_none_match,
                )
            )
            return self._written(request, entity, row, params, created=created)
        guid = key.guid or ""
        if if_none_match is not None and if_none_match.strip() == "*":
            # Create-only on a GUID: rows are never created under a caller's GUID here, so an
            # existing row is the 412 and a missing one the 404 (see the report on upserts).
            await anyio.to_thread.run_sync(lambda: self.service.get(caller, entity.logical_name, guid))
            raise duplicate_key()
        row = await anyio.to_thread.run_sync(
            lambda: self.service.update(caller, entity.logical_name, guid, body, if_match=if_match)
        )
        return self._written(request, entity, row, params, created=False)
