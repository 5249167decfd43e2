"""A Dataverse Web API v9.2 in memory, behind ``httpx.MockTransport``: the wire protocol the
Dataverse writer speaks (copilot/crm/dataverse.py), as Microsoft documents it.

* rows carry a weak ETag ``W/"<n>"`` that every write bumps;
* ``PATCH /<set>(<id>)`` with a stale ``If-Match`` answers 412 with the RowVersion error body
  (``0x80060882``); ``If-Match: *`` on a missing row answers 404;
* ``PATCH /<set>(<keycolumn>='<key>')`` upserts on an alternate key; with ``If-None-Match: *`` an
  existing key answers 412 "A record with matching key values already exists.";
* ``Prefer: return=representation`` answers 201 (created) / 200 (updated) with the row, else 204
  with ``OData-EntityId``; ``honour_prefer=False`` makes it ignore the preference;
* a missing row is 404 with ``0x80040217``; a forbidden entity set is 403; every request past
  ``budget`` is 429 with ``Retry-After``;
* the opportunity's ``salesstage`` option set and attributes are served as metadata.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

API = "/api/data/v9.2/"
KEY_COLUMN = "new_copilotkey"
CONCURRENCY = "0x80060882"
NOT_FOUND = "0x80040217"
KEY_EXISTS = "0x80060892"
_SEGMENT = re.compile(r"^(?P<set>[A-Za-z_]+)\((?P<key>.*)\)$")
_PRIMARY = {
    "accounts": "accountid",
    "opportunities": "opportunityid",
    "contacts": "contactid",
    "phonecalls": "activityid",
    "tasks": "activityid",
    "appointments": "activityid",
}
STAGE_OPTIONS = [(0, "Qualify"), (1, "Develop"), (2, "Propose"), (3, "Close")]


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}}, headers=headers)


@dataclass
class FakeDataverse:
    """The environment's rows by entity set, and what it was asked."""

    tables: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    forbidden_sets: set[str] = field(default_factory=set)
    budget: int | None = None
    retry_after: int = 7
    honour_prefer: bool = True
    serve_metadata: bool = True
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def add(self, entity_set: str, row: dict[str, Any]) -> dict[str, Any]:
        """Seed a row (its ETag assigned); returns it."""
        stored = {**row, "@odata.etag": self._etag()}
        self.tables.setdefault(entity_set, {})[row[_PRIMARY[entity_set]]] = stored
        return stored

    def _etag(self) -> str:
        return f'W/"{next(self._versions)}"'

    def bump(self, entity_set: str, row_id: str, **changes: Any) -> None:
        """Someone else changes a row (a new ETag)."""
        row = self.tables[entity_set][row_id]
        row.update(changes)
        row["@odata.etag"] = self._etag()

    # --- the wire -------------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.budget is not None:
            if self.budget <= 0:
                return _error(
                    429,
                    "0x80072322",
                    "Number of requests exceeded the limit of 6000 over time window of 300 seconds.",
                    {"Retry-After": str(self.retry_after)},
                )
            self.budget -= 1
        path = request.url.path
        assert path.startswith(API), path
        resource = path[len(API) :]
        if resource.startswith("EntityDefinitions"):
            return self._metadata(resource)
        match = _SEGMENT.match(resource)
        if match is None:
            return _error(400, "0x80060888", f"Resource not found for the segment '{resource}'.")
        entity_set, key = match["set"], match["key"]
        if entity_set in self.forbidden_sets:
            return _error(
                403,
                "0x80040220",
                f"Principal user is missing prvRead{entity_set} privilege (PrincipalPrivilegeDenied).",
            )
        table = self.tables.setdefault(entity_set, {})
        by_key = key.startswith(f"{KEY_COLUMN}=")
        row_id: str | None
        if by_key:
            value = key[len(KEY_COLUMN) + 2 : -1].replace("''", "'")
            row_id = next((i for i, r in table.items() if r.get(KEY_COLUMN) == value), None)
        else:
            value, row_id = "", key
        row = table.get(row_id) if row_id is not None else None
        if request.method == "GET":
            if row is None:
                return _error(404, NOT_FOUND, f"{entity_set} With Id = {key} Does Not Exist")
            return httpx.Response(200, json=self._selected(row, request))
        if request.method == "PATCH":
            return self._patch(request, entity_set, table, row, value if by_key else None, row_id)
        return _error(405, "", "Method not allowed")

    def _selected(self, row: dict[str, Any], request: httpx.Request) -> dict[str, Any]:
        select = request.url.params.get("$select")
        if not select:
            return dict(row)
        wanted = set(select.split(",")) | {"@odata.etag"}
        out = {k: v for k, v in row.items() if k in wanted}
        if "$expand" in request.url.params and "transactioncurrencyid" in row:
            out["transactioncurrencyid"] = row["transactioncurrencyid"]
        return out

    def _patch(
        self,
        request: httpx.Request,
        entity_set: str,
        table: dict[str, dict[str, Any]],
        row: dict[str, Any] | None,
        key_value: str | None,
        row_id: str | None,
    ) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        if_match = request.headers.get("if-match")
        if_none_match = request.headers.get("if-none-match")
        representation = self.honour_prefer and "return=representation" in request.headers.get("prefer", "")
        if row is not None and if_none_match == "*":
            return _error(412, KEY_EXISTS, "A record with matching key values already exists.")
        if row is None and if_match is not None:
            return _error(404, NOT_FOUND, f"{entity_set} With Id = {row_id} Does Not Exist")
        if row is not None and if_match not in (None, "*") and if_match != row["@odata.etag"]:
            return _error(
                412,
                CONCURRENCY,
                "The version of the existing record doesn't match the RowVersion property provided.",
            )
        created = row is None
        if created:
            primary = _PRIMARY[entity_set]
            new_id = str(uuid.uuid4())
            row = {primary: new_id, "statecode": 0}
            if key_value is not None:
                row[KEY_COLUMN] = key_value
            table[new_id] = row
            row_id = new_id
        assert row is not None
        for name, value in body.items():
            if "@odata.bind" in name:
                if name.startswith("regardingobjectid_"):
                    row["_regardingobjectid_value"] = value.rsplit("(", 1)[1].rstrip(")")
                row[name] = value
            else:
                row[name] = value
        row["@odata.etag"] = self._etag()
        if representation:
            return httpx.Response(201 if created else 200, json=self._selected(row, request))
        return httpx.Response(
            204, headers={"OData-EntityId": f"https://org.crm.dynamics.com{API}{entity_set}({row_id})"}
        )

    def _metadata(self, resource: str) -> httpx.Response:
        if not self.serve_metadata:
            return _error(404, NOT_FOUND, "Could not find an attribute with specified name.")
        if "PicklistAttributeMetadata" in resource:
            options = [
                {"Value": value, "Label": {"UserLocalizedLabel": {"Label": label}, "LocalizedLabels": []}}
                for value, label in STAGE_OPTIONS
            ]
            return httpx.Response(200, json={"LogicalName": "salesstage", "OptionSet": {"Options": options}})
        attributes = [
            {"LogicalName": name, "IsValidForUpdate": name != "stepname"}
            for name in (
                "name",
                "salesstage",
                "estimatedclosedate",
                "estimatedvalue",
                "stepname",
                "closeprobability",
            )
        ]
        return httpx.Response(200, json={"value": attributes})
