"""Where documents come from: local files and folders, HTTP(S) URLs of single files, or a
Microsoft Graph drive listing (SharePoint document library) with per-file permissions.

Each source yields :class:`SourceFile` objects (bytes + name + URL); reading them into
sections is :mod:`copilot.knowledge.loaders`' job.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import httpx

from copilot.errors import InvalidInput, SourceUnavailable
from copilot.knowledge.loaders import SUFFIXES, format_of


@dataclass(frozen=True)
class SourceFile:
    """One document to ingest."""

    name: str
    """The file name (its extension picks the loader)."""
    document_id: str
    source_url: str
    data: bytes
    acl_groups: tuple[str, ...] = ()
    """Extra access restrictions the source itself states (e.g. a drive item's permissions)."""


def document_id_for(name: str) -> str:
    """A readable, stable id from a file name: ``Negotiation Playbook.md`` → ``negotiation-playbook``."""
    stem = Path(name).stem.lower()
    slug = re.sub(r"[^a-z0-9]+", "-", stem).strip("-")
    if not slug:
        raise InvalidInput(f"cannot derive a document id from {name[:80]!r}")
    return slug[:80]


def local_files(path: Path) -> list[SourceFile]:
    """A file, or every supported file under a folder (sorted, so runs are repeatable)."""
    if not path.exists():
        raise InvalidInput(f"no such file or folder: {path}")
    paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix.lower() in SUFFIXES)
    if not paths:
        raise InvalidInput(f"no Markdown, HTML, PDF or DOCX files under {path}")
    found = []
    for p in paths:
        format_of(p.name)  # a clear error for an unsupported file given by name
        found.append(SourceFile(p.name, document_id_for(p.name), p.resolve().as_uri(), p.read_bytes()))
    return found


def url_file(url: str, *, verify: bool | ssl.SSLContext = True, timeout: float = 30.0) -> SourceFile:
    """One document downloaded over HTTP(S)."""
    name = unquote(Path(urlparse(url).path).name) or "document.html"
    format_of(name)
    try:
        response = httpx.get(url, follow_redirects=True, timeout=timeout, verify=verify)
    except httpx.HTTPError as exc:
        raise SourceUnavailable(f"could not download {url}: {exc}") from exc
    if response.status_code != 200:
        raise InvalidInput(f"{url} answered HTTP {response.status_code}")
    return SourceFile(name, document_id_for(name), url, response.content)


def is_url(text: str) -> bool:
    return urlparse(text).scheme in ("http", "https")


def is_drive_listing(url: str) -> bool:
    """A Graph driveItem collection (``.../drive/root/children``, ``.../items/{id}/children``)."""
    return is_url(url) and urlparse(url).path.rstrip("/").endswith("/children")


def _graph_get(client: httpx.Client, url: str) -> httpx.Response:
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise SourceUnavailable(f"could not reach {url}: {exc}") from exc
    if response.status_code in (401, 403):
        raise InvalidInput(f"{url} refused the token (HTTP {response.status_code}): it needs Sites.Read.All")
    if response.status_code != 200:
        raise SourceUnavailable(f"{url} answered HTTP {response.status_code}")
    return response


def drive_files(listing_url: str, token: str, *, verify: bool | ssl.SSLContext = True) -> list[SourceFile]:
    """Every supported file of a Graph drive listing, with the groups its permissions grant
    read access to (they become the chunks' ACL groups: only members find them)."""
    base = listing_url.split("/v1.0/", 1)[0] + "/v1.0"
    headers = {"Authorization": f"Bearer {token}"}
    found: list[SourceFile] = []
    with httpx.Client(headers=headers, verify=verify, timeout=30.0, follow_redirects=True) as client:
        next_url: str | None = listing_url
        while next_url:
            page = _graph_get(client, next_url).json()
            for item in page.get("value", []):
                name = str(item.get("name") or "")
                if "file" not in item or Path(name).suffix.lower() not in SUFFIXES:
                    continue  # folders, and formats we do not load
                drive = str((item.get("parentReference") or {}).get("driveId") or "")
                item_url = f"{base}/drives/{drive}/items/{item['id']}"
                grants = _graph_get(client, f"{item_url}/permissions").json().get("value", [])
                groups = tuple(
                    str(g["grantedToV2"]["group"]["id"])
                    for g in grants
                    if "read" in (g.get("roles") or []) or "write" in (g.get("roles") or [])
                    if isinstance((g.get("grantedToV2") or {}).get("group"), dict)
                )
                if not groups:
                    # A file shared with no group (only people, or links) is not made searchable
                    # for everyone by mistake: it is left out.
                    continue
                data = _graph_get(
                    client, str(item.get("@microsoft.graph.downloadUrl") or f"{item_url}/content")
                )
                found.append(
                    SourceFile(
                        name,
                        document_id_for(name),
                        str(item.get("webUrl") or item_url),
                        data.content,
                        acl_groups=groups,
                    )
                )
            next_url = page.get("@odata.nextLink")
    return found


def iter_sources(
    target: str, *, token: str | None = None, verify: bool | ssl.SSLContext = True
) -> Iterator[SourceFile]:
    """The files ``target`` (a path, a file URL or a Graph drive listing URL) names."""
    if is_drive_listing(target):
        if not token:
            raise InvalidInput("a drive listing needs a Graph token: pass --bearer-env NAME")
        yield from drive_files(target, token, verify=verify)
    elif is_url(target):
        yield url_file(target, verify=verify)
    else:
        yield from local_files(Path(target).expanduser())
