"""Knowledge chunks in PostgreSQL: ingest (replace or skip by hash), list, remove, search.

Search matches each chunk's access list in the WHERE clause (see :func:`_acl_filter`),
so a chunk the reader may not see is never selected: it cannot reach a tool result, the
model, an answer or a trace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.documents import Document
from psycopg import AsyncConnection, sql
from psycopg.rows import DictRow

from copilot.knowledge.acl import Acl, Reader
from copilot.knowledge.embedding import EmbeddingModel, hnsw_index_name, vector_literal

IngestOutcome = Literal["added", "replaced", "unchanged"]

RRF_K = 60
"""Reciprocal rank fusion's constant (the usual 60): ranks, not raw scores, are fused."""
CANDIDATES = 40
"""How many candidates each ranking contributes before fusion."""


def chunk_id(tenant_id: str, document_id: str, ordinal: int) -> str:
    """A chunk's citable id: stable for a document's n-th chunk, unique across tenants."""
    digest = hashlib.sha256(f"{tenant_id}\x1f{document_id}".encode()).hexdigest()[:10]
    return f"kb-{digest}-{ordinal}"


@dataclass(frozen=True)
class StoredDocument:
    tenant_id: str
    document_id: str
    title: str
    source_url: str
    content_hash: str
    acl: Acl
    chunk_count: int
    ingested_at: str


@dataclass(frozen=True)
class Hit:
    """One search result: a chunk the reader may see."""

    chunk_id: str
    document_id: str
    title: str
    section: str
    source_url: str
    snippet: str
    score: float


async def ingest(
    conn: AsyncConnection[DictRow],
    *,
    document_id: str,
    title: str,
    source_url: str,
    content_hash: str,
    acl: Acl,
    chunks: Sequence[Document],
) -> IngestOutcome:
    """Store a document's chunks: skip it if its hash and ACL are unchanged, else replace
    all of its chunks at once (one transaction, so a search never sees half of each)."""
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT content_hash, acl_groups, acl_roles, acl_territories FROM knowledge_documents"
            " WHERE tenant_id = %s AND document_id = %s FOR UPDATE",
            (acl.tenant_id, document_id),
        )
        row = await cur.fetchone()
        if (
            row is not None
            and row["content_hash"] == content_hash
            and (row["acl_groups"], row["acl_roles"], row["acl_territories"])
            == (acl.groups, acl.roles, acl.territories)
        ):
            return "unchanged"
        await conn.execute(
            "DELETE FROM knowledge_documents WHERE tenant_id = %s AND document_id = %s",
            (acl.tenant_id, document_id),
        )
        await conn.execute(
            "INSERT INTO knowledge_documents (tenant_id, document_id, title, source_url, content_hash,"
            " acl_groups, acl_roles, acl_territories, chunk_count) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (
                acl.tenant_id,
                document_id,
                title,
                source_url,
                content_hash,
                acl.groups,
                acl.roles,
                acl.territories,
                len(chunks),
            ),
        )
        async with conn.cursor() as cur2:
            await cur2.executemany(
                "INSERT INTO knowledge_chunks (chunk_id, tenant_id, document_id, ordinal, title, section,"
                " headings, source_url, content, content_hash, acl_groups, acl_roles, acl_territories)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                [
                    (
                        chunk_id(acl.tenant_id, document_id, n),
                        acl.tenant_id,
                        document_id,
                        n,
                        title,
                        str(doc.metadata.get("section") or ""),
                        [str(h) for h in doc.metadata.get("headings") or []],
                        source_url,
                        doc.page_content,
                        content_hash,
                        acl.groups,
                        acl.roles,
                        acl.territories,
                    )
                    for n, doc in enumerate(chunks)
                ],
            )
    return "replaced" if row is not None else "added"


async def list_documents(
    conn: AsyncConnection[DictRow], tenant_id: str | None = None
) -> list[StoredDocument]:
    """The ingested documents (of one tenant, if given), by tenant and id."""
    cur = await conn.execute(
        "SELECT * FROM knowledge_documents WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s"
        " ORDER BY tenant_id, document_id",
        {"tenant": tenant_id},
    )
    return [
        StoredDocument(
            tenant_id=r["tenant_id"],
            document_id=r["document_id"],
            title=r["title"],
            source_url=r["source_url"],
            content_hash=r["content_hash"],
            acl=Acl(
                tenant_id=r["tenant_id"],
                groups=r["acl_groups"],
                roles=r["acl_roles"],
                territories=r["acl_territories"],
            ),
            chunk_count=r["chunk_count"],
            ingested_at=r["ingested_at"].isoformat(),
        )
        for r in await cur.fetchall()
    ]


async def remove(conn: AsyncConnection[DictRow], tenant_id: str, document_id: str) -> int | None:
    """Delete a document and its chunks; the number of chunks removed (None: no such document)."""
    async with conn.transaction():
        cur = await conn.execute(
            "DELETE FROM knowledge_chunks WHERE tenant_id = %s AND document_id = %s",
            (tenant_id, document_id),
        )
        removed = cur.rowcount
        cur = await conn.execute(
            "DELETE FROM knowledge_documents WHERE tenant_id = %s AND document_id = %s",
            (tenant_id, document_id),
        )
        return removed if cur.rowcount else None


def _acl_filter(alias: str) -> sql.Composed:
    """The access check, in SQL: tenant equal, and every non-empty ACL list overlapping."""
    a = sql.Identifier(alias)
    return sql.SQL(
        "{a}.tenant_id = %(tenant)s"
        " AND (cardinality({a}.acl_groups) = 0 OR {a}.acl_groups && %(groups)s::text[])"
        " AND (cardinality({a}.acl_roles) = 0 OR {a}.acl_roles && %(roles)s::text[])"
        " AND (cardinality({a}.acl_territories) = 0 OR {a}.acl_territories && %(territories)s::text[])"
    ).format(a=a)


# Matching is on any of the query's words (a rep's question is not a keyword list), and
# ranking is cover density, so chunks with more of the words close together come first.
_TEXT_QUERY = """
query AS (
    SELECT coalesce(
        to_tsquery('simple', nullif(array_to_string(ARRAY(
            SELECT quote_literal(lexeme)
            FROM unnest(tsvector_to_array(to_tsvector('english', %(q)s))) AS lexeme
        ), ' | '), '')),
        ''::tsquery
    ) AS tsq
),
text_ranked AS (
    SELECT chunk_id, row_number() OVER (ORDER BY text_rank DESC, chunk_id) AS rank
    FROM (
        -- A scalar subquery (not a join), so the planner can use the GIN index.
        SELECT c.chunk_id, ts_rank_cd(c.tsv, (SELECT tsq FROM query)) AS text_rank
        FROM knowledge_chunks c
        WHERE c.tsv @@ (SELECT tsq FROM query) AND {acl}
        ORDER BY text_rank DESC, c.chunk_id
        LIMIT {candidates}
    ) matched
)"""

_VECTOR_QUERY = """,
vector_ranked AS (
    SELECT chunk_id, row_number() OVER (ORDER BY distance, chunk_id) AS rank
    FROM (
        SELECT c.chunk_id, (c.embedding::vector({dims})) <=> %(vector)s::vector({dims}) AS distance
        FROM knowledge_chunks c
        WHERE c.embedding_model = {model} AND {acl}
        ORDER BY (c.embedding::vector({dims})) <=> %(vector)s::vector({dims})
        LIMIT {candidates}
    ) nearest
)"""


def search_sql(model: EmbeddingModel | None, dims: int | None) -> sql.Composed:
    """The search statement: full-text rank alone, or fused with vector rank (RRF)."""
    acl = _acl_filter("c")
    parts: list[sql.Composable] = [
        sql.SQL("WITH"),
        sql.SQL(_TEXT_QUERY).format(acl=acl, candidates=sql.Literal(CANDIDATES)),
    ]
    if model is not None and dims is not None:
        parts.append(
            sql.SQL(_VECTOR_QUERY).format(
                acl=acl,
                candidates=sql.Literal(CANDIDATES),
                dims=sql.SQL(str(int(dims))),
                model=sql.Literal(model.name),
            )
        )
        fused = sql.SQL(
            "SELECT chunk_id, sum(1.0 / ({k} + rank)) AS score FROM ("
            " SELECT chunk_id, rank FROM text_ranked UNION ALL SELECT chunk_id, rank FROM vector_ranked"
            ") ranks GROUP BY chunk_id"
        ).format(k=sql.Literal(RRF_K))
    else:
        fused = sql.SQL("SELECT chunk_id, 1.0 / ({k} + rank) AS score FROM text_ranked").format(
            k=sql.Literal(RRF_K)
        )
    parts.append(
        sql.SQL(
            ", fused AS ({fused})"
            " SELECT c.chunk_id, c.document_id, c.title, c.section, c.source_url, f.score::float8 AS score,"
            " ts_headline('english', c.content, query.tsq,"
            '   \'MaxWords=45, MinWords=20, MaxFragments=2, FragmentDelimiter=" … ", StartSel="", StopSel=""\')'
            "   AS snippet"
            " FROM fused f JOIN knowledge_chunks c USING (chunk_id), query"
            # The access check again on the rows returned: defence in depth, and cheap.
            " WHERE {acl}"
            " ORDER BY f.score DESC, c.chunk_id LIMIT %(limit)s"
        ).format(fused=fused, acl=acl)
    )
    return sql.Composed(parts)


async def search(
    conn: AsyncConnection[DictRow],
    reader: Reader,
    query: str,
    *,
    limit: int = 5,
    embeddings: EmbeddingModel | None = None,
) -> list[Hit]:
    """The chunks ``reader`` may see that best answer ``query``, best first."""
    params: dict[str, Any] = {
        "tenant": reader.tenant_id,
        "groups": reader.groups,
        "roles": reader.roles,
        "territories": reader.territories,
        "q": query,
        "limit": limit,
    }
    dims = None
    if embeddings is not None:
        vector = await embeddings.embed_query(query)
        dims = len(vector)
        params["vector"] = vector_literal(vector)
    async with conn.transaction():
        if embeddings is not None:
            # The access check filters what the HNSW scan yields; an iterative scan keeps
            # reading the index until enough allowed rows are found instead of returning fewer
            # than asked for. Needs pgvector 0.8 or later (the embedded wheel ships 0.8.6).
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cur = await conn.execute(search_sql(embeddings, dims), params)
        rows = await cur.fetchall()
    return [
        Hit(
            chunk_id=r["chunk_id"],
            document_id=r["document_id"],
            title=r["title"],
            section=r["section"],
            source_url=r["source_url"],
            snippet=" ".join(str(r["snippet"]).split()),
            score=float(r["score"]),
        )
        for r in rows
    ]


async def embed_pending(conn: AsyncConnection[DictRow], model: EmbeddingModel, *, batch: int = 64) -> int:
    """Embed every chunk not yet embedded by ``model`` (new chunks, or all of them after the
    model changed: vectors of another model are replaced, never mixed); make sure the
    model's HNSW index exists. Returns how many chunks were embedded."""
    done = 0
    dims: int | None = None
    while True:
        cur = await conn.execute(
            "SELECT chunk_id, title, section, content FROM knowledge_chunks"
            " WHERE embedding_model IS DISTINCT FROM %s ORDER BY chunk_id LIMIT %s",
            (model.name, batch),
        )
        rows = await cur.fetchall()
        if not rows:
            break
        vectors = await model.embed_documents([f"{r['title']}\n{r['section']}\n{r['content']}" for r in rows])
        async with conn.transaction(), conn.cursor() as up:
            await up.executemany(
                "UPDATE knowledge_chunks SET embedding = %s::vector, embedding_model = %s WHERE chunk_id = %s",
                [(vector_literal(v), model.name, r["chunk_id"]) for r, v in zip(rows, vectors, strict=True)],
            )
        dims = len(vectors[0])
        done += len(rows)
    if dims is None:
        cur = await conn.execute(
            "SELECT vector_dims(embedding) AS dims FROM knowledge_chunks WHERE embedding_model = %s LIMIT 1",
            (model.name,),
        )
        row = await cur.fetchone()
        dims = None if row is None else int(row["dims"])
    if dims is not None:
        await conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {name} ON knowledge_chunks"
                " USING hnsw ((embedding::vector({dims})) vector_cosine_ops) WHERE embedding_model = {model}"
            ).format(
                name=sql.Identifier(hnsw_index_name(model.name)),
                dims=sql.SQL(str(int(dims))),
                model=sql.Literal(model.name),
            )
        )
    return done


def content_hash(data: bytes) -> str:
    """The hash that decides whether a re-ingested document changed."""
    return hashlib.sha256(data).hexdigest()


def compact(hit: Hit) -> dict[str, Any]:
    """What the model sees of one chunk: its citable id, title, section, link and a snippet."""
    return {
        "id": hit.chunk_id,
        "title": hit.title,
        "section": hit.section,
        "url": hit.source_url,
        "snippet": hit.snippet,
    }
