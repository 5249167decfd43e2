"""A Graph document library (SharePoint drive) as a knowledge source: the listing URL, the
token it needs, and its documents ingested or just chunked (for expectations in evals)."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from langchain_core.documents import Document
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from copilot.auth.tokens import OboTokenBroker
from copilot.knowledge.acl import Acl
from copilot.knowledge.ingest import IngestResult, chunks_of, ingest_files
from copilot.knowledge.sources import drive_files
from copilot.settings import Settings
from copilot.tls import ssl_context

SITES_SCOPE = "Sites.Read.All"


def listing_url(settings: Settings) -> str:
    """The root folder of the tenant's default site drive, on ``GRAPH_BASE_URL``."""
    return f"{settings.graph_base_url.rstrip('/')}/sites/root/drive/root/children"


async def library_token(settings: Settings, broker: OboTokenBroker) -> str:
    """A delegated token that may read the document library."""
    return await broker.token_for([f"{settings.graph_resource}/{SITES_SCOPE}"])


def _verify(settings: Settings) -> ssl.SSLContext:
    return ssl_context(str(settings.ca_bundle) if settings.ca_bundle is not None else None)


async def ingest_library(
    conn: AsyncConnection[DictRow], settings: Settings, token: str, tenant_id: str
) -> list[IngestResult]:
    """Every file of the library into knowledge search, with its permissions as its ACL."""
    files = await asyncio.to_thread(drive_files, listing_url(settings), token, verify=_verify(settings))
    return await ingest_files(conn, files, Acl(tenant_id=tenant_id))


@dataclass(frozen=True)
class LibraryDocument:
    document_id: str
    title: str
    groups: tuple[str, ...]
    chunks: list[Document]


async def read_library(settings: Settings, token: str) -> list[LibraryDocument]:
    """The library's documents as ingestion would chunk them (nothing stored)."""
    files = await asyncio.to_thread(drive_files, listing_url(settings), token, verify=_verify(settings))
    documents = []
    for file in files:
        title, chunks = chunks_of(file)
        documents.append(
            LibraryDocument(file.document_id, title, tuple(g.lower() for g in file.acl_groups), chunks)
        )
    return documents
