"""A SharePoint-like document library, Graph-shaped: the sales playbooks with per-file permissions.

Each tenant's site has one drive. A caller presents a delegated Graph token with
``Sites.Read.All`` and sees their own tenant's drive only:

- ``GET /v1.0/sites/root/drive/root/children``: the files (driveItems with ``id``, ``name``,
  ``size``, ``file.mimeType``, ``webUrl``, ``parentReference.driveId``,
  ``@microsoft.graph.downloadUrl``);
- ``GET /v1.0/drives/{drive_id}/items/{item_id}/permissions``: who may read the file (group
  grants, ``grantedToV2.group``; the group ids are those in the users' ``groups`` claim);
- ``GET /v1.0/drives/{drive_id}/items/{item_id}/content``: the file's bytes.

The files are the playbooks under ``sandbox/knowledge/`` (written for the sandbox).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.config import SandboxSettings
from sandbox.directory import CONTOSO, FABRIKAM
from sandbox.identity.tokens import TokenClaims, TokenError, bearer_from_header, validate_token
from sandbox.mailbox import GraphError, graph_error_response

SITES_SCOPE = "Sites.Read.All"
LIBRARY = Path(__file__).resolve().parent / "knowledge"

GROUP_NAMES = {
    "sales": "Sales (everyone)",
    "sales-managers": "Sales managers",
    "sales-west": "Sales West region",
    "sales-east": "Sales East region",
}

# Per tenant: file name -> the groups granted read access.
_DRIVES: dict[str, dict[str, tuple[str, ...]]] = {
    CONTOSO.id: {
        **{p.name: ("sales",) for p in sorted(LIBRARY.glob("*.md"))},
        "pricing-guide-managers.md": ("sales-managers",),
        "west-region-field-guide.md": ("sales-west",),
    },
    FABRIKAM.id: {"objection-handling.md": ("sales",)},
}

_MIME = {".md": "text/markdown", ".html": "text/html", ".pdf": "application/pdf"}


@dataclass(frozen=True)
class DriveItem:
    id: str
    name: str
    groups: tuple[str, ...]

    @property
    def path(self) -> Path:
        return LIBRARY / self.name


def drive_id(tenant_id: str) -> str:
    """The tenant's drive id (stable, Graph-looking)."""
    return "b!" + hashlib.sha256(f"drive:{tenant_id}".encode()).hexdigest()[:24]


def drive_items(tenant_id: str) -> list[DriveItem]:
    """A tenant's files, by name."""
    files = _DRIVES.get(tenant_id, {})
    return [
        DriveItem(hashlib.sha256(f"{tenant_id}:{name}".encode()).hexdigest()[:16].upper(), name, groups)
        for name, groups in sorted(files.items())
    ]


def drive_routes(settings: SandboxSettings) -> list[Route]:
    """Starlette routes of the document library under ``/v1.0``."""

    def authenticated(
        handler: Callable[[Request, TokenClaims], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request, _authenticate(settings, request))
            except GraphError as exc:
                return graph_error_response(request, exc)

        return endpoint

    def content_url(tenant_id: str, item: DriveItem) -> str:
        return f"{settings.http_base_url}/v1.0/drives/{drive_id(tenant_id)}/items/{item.id}/content"

    def item_json(tenant_id: str, item: DriveItem) -> dict[str, object]:
        return {
            "id": item.id,
            "name": item.name,
            "size": item.path.stat().st_size,
            "webUrl": f"{settings.http_base_url}/sites/sales/Shared%20Documents/{quote(item.name)}",
            "file": {"mimeType": _MIME.get(item.path.suffix, "application/octet-stream")},
            "parentReference": {"driveId": drive_id(tenant_id), "path": "/drive/root:"},
            "@microsoft.graph.downloadUrl": content_url(tenant_id, item),
        }

    def find(request: Request, caller: TokenClaims) -> DriveItem:
        # Another tenant's drive or item is "not found", never "forbidden".
        if request.path_params["drive_id"] != drive_id(caller.tenant_id):
            raise GraphError(404, "itemNotFound", "The resource could not be found.")
        for item in drive_items(caller.tenant_id):
            if item.id == request.path_params["item_id"]:
                return item
        raise GraphError(404, "itemNotFound", "The resource could not be found.")

    async def children(request: Request, caller: TokenClaims) -> Response:
        return JSONResponse(
            {"value": [item_json(caller.tenant_id, i) for i in drive_items(caller.tenant_id)]}
        )

    async def permissions(request: Request, caller: TokenClaims) -> Response:
        item = find(request, caller)
        return JSONResponse(
            {
                "value": [
                    {
                        "id": f"perm-{group}",
                        "roles": ["read"],
                        "grantedToV2": {"group": {"id": group, "displayName": GROUP_NAMES.get(group, group)}},
                    }
                    for group in item.groups
                ]
            }
        )

    async def content(request: Request, caller: TokenClaims) -> Response:
        item = find(request, caller)
        return Response(
            item.path.read_bytes(), media_type=_MIME.get(item.path.suffix, "application/octet-stream")
        )

    return [
        Route("/v1.0/sites/root/drive/root/children", authenticated(children), methods=["GET"]),
        Route(
            "/v1.0/drives/{drive_id}/items/{item_id}/permissions", authenticated(permissions), methods=["GET"]
        ),
        Route("/v1.0/drives/{drive_id}/items/{item_id}/content", authenticated(content), methods=["GET"]),
    ]


def _authenticate(settings: SandboxSettings, request: Request) -> TokenClaims:
    try:
        token = bearer_from_header(request.headers.get("authorization"))
        return validate_token(
            settings, token, audience=settings.graph_audience, required_scopes={SITES_SCOPE}
        )
    except TokenError as exc:
        code = "InvalidAuthenticationToken" if exc.status == 401 else "accessDenied"
        message = exc.description if exc.status == 401 else f"Access is denied. {exc.description}"
        raise GraphError(exc.status, code, message, {"WWW-Authenticate": exc.www_authenticate()}) from exc
