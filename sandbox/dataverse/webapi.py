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
from sandbox.dataverse.records import DataverseService, Snapshot, currency_row
from sandbox.dataverse.schema import Entity, by_set
from sandbox.dataverse.security import authenticate, charge
from sandbox.directory import User
from sandbox.knobs import KnobState

API_PREFIX = "/api/data/v9.2/"
ODATA_HEADERS = {"OData-Version": "4.0"}
_RESOURCE = re.compile(r"^(?P<set>[A-Za-z_]+)(?:\((?P<key>[^)]*)\))?$")


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


def _parse_key(entity: Entity, text: str) -> _Key:
    guid = parse_guid(text)
    if guid is not None:
        return _Key(guid=guid)
    name, eq, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if eq and name == entity.primary_id and parse_guid(value):
        return _Key(guid=parse_guid(value))
    if eq and name == entity.alternate_key and len(value) >= 2 and value[0] == value[-1] == "'":
        return _Key(alternate=value[1:-1].replace("''", "'"))
    raise bad_request(
        f"The key '{text}' is not valid for {entity.logical_name}: use a GUID"
        + (f" or {entity.alternate_key}='<value>'." if entity.alternate_key else ".")
    )


class WebApi:
    """The Web API's request handling; one instance per app."""

    def __init__(self, settings: SandboxSettings, knobs: KnobState, service: DataverseService) -> None:
        self.settings = settings
        self.knobs = knobs
        self.service = service
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
        if path.startswith("EntityDefinitions"):
            if method != "GET":
                raise DataverseError(405, "0x80060888", "Metadata is read-only here.")
            body = metadata.resolve(self.service.tables, path.split("/"), params)
            return _json(body)
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
        key = _parse_key(entity, key_text)
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
                shaped[item.navigation] = snap.parties_of(entity.logical_name, row[entity.primary_id])
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
