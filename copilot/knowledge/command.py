"""The ``knowledge`` command: ingest, list and remove documents (an administrator's tool)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

from copilot.errors import InvalidInput
from copilot.knowledge import store
from copilot.knowledge.acl import parse_acl
from copilot.knowledge.embedding import from_setting
from copilot.knowledge.ingest import ingest_files
from copilot.knowledge.sources import iter_sources
from copilot.persistence.database import connect
from copilot.persistence.migrations import assert_schema_current
from copilot.settings import Settings
from copilot.tls import ssl_context

_BAR = 30


def _bar(done: int, total: int, name: str) -> None:
    """A progress bar on stderr (the JSON on stdout stays clean)."""
    filled = _BAR * done // max(total, 1)
    print(
        f"\r[{'#' * filled}{'.' * (_BAR - filled)}] {done}/{total} {name[:40]:<40}", end="", file=sys.stderr
    )
    if done == total:
        print(file=sys.stderr, flush=True)


async def ingest(
    settings: Settings,
    *,
    target: str,
    tenant: str,
    acl: list[str],
    as_json: bool,
    bearer_env: str | None = None,
) -> int:
    """``knowledge ingest PATH_OR_URL --tenant T [--acl kind:value ...] [--bearer-env NAME]``.

    A drive listing's files keep the source's own permissions: its groups are added to the
    ACL. The bearer token is read from the environment variable named, never an argument
    (it would show in the process list and shell history)."""
    try:
        parsed = parse_acl(tenant, acl)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    token = None
    if bearer_env:
        token = os.environ.get(bearer_env)
        if not token:
            raise InvalidInput(f"the environment variable {bearer_env} holds no token")
    verify = ssl_context(str(settings.ca_bundle) if settings.ca_bundle is not None else None)
    files = list(iter_sources(target, token=token, verify=verify))
    embeddings = from_setting(settings.copilot_embeddings)
    async with connect(settings) as conn:
        await assert_schema_current(conn)
        results = await ingest_files(conn, files, parsed, progress=None if as_json else _bar)
        embedded = 0 if embeddings is None else await store.embed_pending(conn, embeddings)
    if as_json:
        print(json.dumps({"documents": [asdict(r) for r in results], "embedded": embedded}))
    else:
        for r in results:
            print(f"{r.outcome:<9} {r.document_id}  ({r.chunks} chunks)  {r.title}")
        if embeddings is not None:
            print(f"embedded {embedded} chunks with {embeddings.name}")
    return 0


async def list_command(settings: Settings, *, tenant: str | None, as_json: bool) -> int:
    """``knowledge list [--tenant T]``."""
    async with connect(settings) as conn:
        await assert_schema_current(conn)
        documents = await store.list_documents(conn, tenant)
    if as_json:
        print(json.dumps({"documents": [{**asdict(d), "acl": d.acl.model_dump()} for d in documents]}))
        return 0
    if not documents:
        print("no documents ingested")
    for d in documents:
        access = ", ".join(
            f"{kind}:{'|'.join(values)}"
            for kind, values in (
                ("group", d.acl.groups),
                ("role", d.acl.roles),
                ("territory", d.acl.territories),
            )
            if values
        )
        print(
            f"{d.document_id}  {d.title}  ({d.chunk_count} chunks)  tenant {d.tenant_id}  {access or 'everyone'}"
        )
    return 0


async def remove_command(settings: Settings, *, tenant: str, document_id: str, as_json: bool) -> int:
    """``knowledge remove DOCUMENT_ID --tenant T``: exit 2 if there is no such document."""
    async with connect(settings) as conn:
        await assert_schema_current(conn)
        removed = await store.remove(conn, tenant, document_id)
    if removed is None:
        raise InvalidInput(f"no document {document_id!r} in tenant {tenant}")
    if as_json:
        print(json.dumps({"document_id": document_id, "removed_chunks": removed}))
    else:
        print(f"removed {document_id} ({removed} chunks)")
    return 0
