"""Where documents come from: local files and folders, or HTTP(S) URLs of single files.

Each source yields :class:`SourceFile` objects (bytes + name + URL); reading them into
sections is :mod:`copilot.knowledge.loaders`' job.
"""

from __future__ import annotations

import re
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


def url_file(url: str, *, verify: bool | str = True, timeout: float = 30.0) -> SourceFile:
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


def iter_sources(target: str) -> Iterator[SourceFile]:
    """The files ``target`` (a path or URL) names."""
    if is_url(target):
        yield url_file(target)
    else:
        yield from local_files(Path(target).expanduser())
