"""Ingestion: source files → sections → chunks → PostgreSQL (skip unchanged, replace changed)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from langchain_core.documents import Document
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from copilot.knowledge import store
from copilot.knowledge.acl import Acl
from copilot.knowledge.loaders import format_of, loader_for, split, title_of
from copilot.knowledge.sources import SourceFile


@dataclass(frozen=True)
class IngestResult:
    document_id: str
    title: str
    source_url: str
    outcome: store.IngestOutcome
    chunks: int


Progress = Callable[[int, int, str], None]
"""``(done, total, name)`` after each file: drives the command's progress bar."""


def chunks_of(file: SourceFile) -> tuple[str, list[Document]]:
    """A file's title and chunks, as they would be stored (pure apart from a scratch file)."""
    fmt = format_of(file.name)
    # Loaders read files; a downloaded document gets a scratch file with its own suffix.
    with tempfile.TemporaryDirectory(prefix="knowledge-") as scratch:
        path = Path(scratch) / f"doc{Path(file.name).suffix.lower()}"
        path.write_bytes(file.data)
        sections = loader_for(path, fmt).load()
    return title_of(sections, Path(file.name).stem), split(sections)


async def ingest_files(
    conn: AsyncConnection[DictRow],
    files: Iterable[SourceFile],
    acl: Acl,
    progress: Progress | None = None,
) -> list[IngestResult]:
    """Ingest each file under ``acl`` (plus any groups the source itself restricts it to)."""
    todo = list(files)
    results = []
    for done, file in enumerate(todo, start=1):
        title, chunks = chunks_of(file)
        file_acl = acl
        if file.acl_groups:
            file_acl = acl.model_copy(
                update={"groups": sorted({*acl.groups, *(g.lower() for g in file.acl_groups)})}
            )
        outcome = await store.ingest(
            conn,
            document_id=file.document_id,
            title=title,
            source_url=file.source_url,
            content_hash=store.content_hash(file.data),
            acl=file_acl,
            chunks=chunks,
        )
        results.append(IngestResult(file.document_id, title, file.source_url, outcome, len(chunks)))
        if progress is not None:
            progress(done, len(todo), file.name)
    return results
