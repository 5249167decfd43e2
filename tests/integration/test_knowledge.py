"""Knowledge ingestion and retrieval on real PostgreSQL (with pgvector)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from psycopg import AsyncConnection

from copilot.knowledge import store
from copilot.knowledge.acl import Acl, Reader, parse_acl
from copilot.knowledge.embedding import EmbeddingModel, hnsw_index_name
from copilot.knowledge.ingest import ingest_files
from copilot.knowledge.sources import local_files
from copilot.persistence.migrations import migrate
from tests.support.documents import write_docx, write_pdf

pytestmark = pytest.mark.integration

SANDBOX_KNOWLEDGE = Path(__file__).resolve().parents[2] / "sandbox" / "knowledge"
CONTOSO = "tenant-contoso"
FABRIKAM = "tenant-fabrikam"


class HashingEmbeddings(Embeddings):
    """A deterministic embedding model for tests: hashed word counts, L2-normalised, so
    texts sharing words are close (no model download, same vectors every run)."""

    def __init__(self, dims: int = 64, salt: str = "") -> None:
        self.dims = dims
        self.salt = salt

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dims
        for word in text.lower().split():
            word = "".join(ch for ch in word if ch.isalnum())
            if len(word) < 3:
                continue
            bucket = int(hashlib.sha256((self.salt + word[:6]).encode()).hexdigest(), 16) % self.dims
            vector[bucket] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


@pytest.fixture
async def conn(db_conn: AsyncConnection[Any]) -> AsyncConnection[Any]:
    await migrate(db_conn)
    return db_conn


async def _chunk_count(conn: AsyncConnection[Any], document_id: str) -> int:
    cur = await conn.execute(
        "SELECT count(*) AS n FROM knowledge_chunks WHERE document_id = %s", (document_id,)
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_markdown_html_pdf_and_docx_are_chunked_with_their_headings_and_sources(
    conn: AsyncConnection[Any], tmp_path: Path
) -> None:
    (tmp_path / "renewals.md").write_text(
        "# Renewal playbook\n\n## Before the renewal\nReview usage ninety days ahead.\n\n"
        "## At the renewal\nPropose a three-year term.\n",
        encoding="utf-8",
    )
    write_pdf(
        tmp_path / "price-list.pdf",
        [["Price list", "Fleet Platform costs 20 per vehicle."], ["Terms apply."]],
    )
    write_docx(
        tmp_path / "objections.docx",
        [(1, "Objection handling"), (2, "Too expensive"), (0, "Reframe on total cost of ownership.")],
    )
    (tmp_path / "sheet.html").write_text(
        "<html><body><h1>Fleet sheet</h1><p>Intro.</p><h2>Pricing</h2><p>Per vehicle per month.</p>"
        "<p>Volume tiers.</p></body></html>",
        encoding="utf-8",
    )
    results = await ingest_files(conn, local_files(tmp_path), Acl(tenant_id=CONTOSO))

    assert {(r.document_id, r.outcome) for r in results} == {
        ("renewals", "added"),
        ("price-list", "added"),
        ("objections", "added"),
        ("sheet", "added"),
    }
    cur = await conn.execute(
        "SELECT document_id, title, section, headings, source_url, content FROM knowledge_chunks"
        " ORDER BY document_id, ordinal"
    )
    rows = [dict(r) for r in await cur.fetchall()]
    by_doc = {(r["document_id"], r["section"]): r for r in rows}
    md = by_doc[("renewals", "At the renewal")]
    assert md["title"] == "Renewal playbook"
    assert md["headings"] == ["Renewal playbook", "At the renewal"]
    assert "three-year term" in md["content"]
    assert md["source_url"] == (tmp_path / "renewals.md").resolve().as_uri()
    assert "20 per vehicle" in by_doc[("price-list", "Page 1")]["content"]
    assert by_doc[("price-list", "Page 2")]["content"].strip() == "Terms apply."
    html = by_doc[("sheet", "Pricing")]
    assert (html["title"], html["headings"]) == ("Fleet sheet", ["Fleet sheet", "Pricing"])
    assert "Per vehicle per month." in html["content"]
    assert "Volume tiers." in html["content"]
    docx_chunk = by_doc[("objections", "Too expensive")]
    assert docx_chunk["title"] == "Objection handling"
    assert "total cost of ownership" in docx_chunk["content"]


async def test_reingesting_skips_an_unchanged_file_and_replaces_a_changed_one(
    conn: AsyncConnection[Any], tmp_path: Path
) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text("# Guide\n\n## One\nFirst version.\n\n## Two\nMore.\n", encoding="utf-8")
    other = tmp_path / "other.md"
    other.write_text("# Other\n\nUnchanged text.\n", encoding="utf-8")
    acl = Acl(tenant_id=CONTOSO)
    await ingest_files(conn, local_files(tmp_path), acl)
    cur = await conn.execute("SELECT ingested_at FROM knowledge_documents WHERE document_id = 'other'")
    before = await cur.fetchone()

    doc.write_text("# Guide\n\n## One\nSecond version.\n", encoding="utf-8")
    results = await ingest_files(conn, local_files(tmp_path), acl)

    assert {r.document_id: r.outcome for r in results} == {"guide": "replaced", "other": "unchanged"}
    cur = await conn.execute("SELECT content FROM knowledge_chunks WHERE document_id = 'guide'")
    contents = [r["content"] for r in await cur.fetchall()]
    assert contents == ["Second version."]
    cur = await conn.execute("SELECT ingested_at FROM knowledge_documents WHERE document_id = 'other'")
    assert await cur.fetchone() == before


async def test_removing_a_document_deletes_its_chunks_and_an_unknown_one_is_reported(
    conn: AsyncConnection[Any], tmp_path: Path
) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## S\nText.\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("# B\n\n## S\nText.\n", encoding="utf-8")
    await ingest_files(conn, local_files(tmp_path), Acl(tenant_id=CONTOSO))

    assert await store.remove(conn, CONTOSO, "a") == 1
    assert await _chunk_count(conn, "a") == 0
    assert await _chunk_count(conn, "b") == 1
    assert await store.remove(conn, CONTOSO, "a") is None
    assert await store.remove(conn, FABRIKAM, "b") is None  # another tenant's id names nothing here
    assert [d.document_id for d in await store.list_documents(conn)] == ["b"]


async def _sandbox_library(conn: AsyncConnection[Any]) -> None:
    """The sandbox's playbooks for Contoso, with their restrictions; one document for Fabrikam."""
    files = local_files(SANDBOX_KNOWLEDGE)
    open_files = [
        f for f in files if f.document_id not in ("pricing-guide-managers", "west-region-field-guide")
    ]
    await ingest_files(conn, open_files, Acl(tenant_id=CONTOSO))
    await ingest_files(
        conn,
        [f for f in files if f.document_id == "pricing-guide-managers"],
        parse_acl(CONTOSO, ["role:manager"]),
    )
    await ingest_files(
        conn,
        [f for f in files if f.document_id == "west-region-field-guide"],
        parse_acl(CONTOSO, ["territory:West"]),
    )
    await ingest_files(
        conn, [f for f in files if f.document_id == "playbook-negotiation"], Acl(tenant_id=FABRIKAM)
    )


REP = Reader(tenant_id=CONTOSO, roles=["rep"], groups=["sales"], territories=["East"])
WEST_REP = Reader(tenant_id=CONTOSO, roles=["rep"], territories=["West"])
MANAGER = Reader(tenant_id=CONTOSO, roles=["manager"])


@pytest.mark.parametrize(
    ("query", "document_id", "section"),
    [
        ("negotiation stage playbook next steps", "playbook-negotiation", "Next steps"),
        ("next steps after presenting the proposal", "playbook-proposal", "Next steps"),
        ("customer says it is too expensive", "objection-handling", '"It is too expensive"'),
        ("predictive maintenance analytics", "product-analytics-add-on", "What it is"),
        ("we already have a telematics provider", "objection-handling", None),
    ],
)
async def test_full_text_ranking_puts_the_relevant_section_first(
    conn: AsyncConnection[Any], query: str, document_id: str, section: str | None
) -> None:
    await _sandbox_library(conn)
    hits = await store.search(conn, REP, query)
    assert hits, query
    assert hits[0].document_id == document_id, [(h.document_id, h.section) for h in hits]
    if section is not None:
        assert hits[0].section == section
    assert hits[0].snippet
    assert len(hits[0].snippet) < 600


async def test_a_rep_without_access_gets_no_restricted_chunk(conn: AsyncConnection[Any]) -> None:
    await _sandbox_library(conn)
    for query in ("discount authority pricing floor", "West depot pilot regional programmes"):
        seen = {h.document_id for h in await store.search(conn, REP, query, limit=20)}
        assert "pricing-guide-managers" not in seen
        assert "west-region-field-guide" not in seen
    manager = {h.document_id for h in await store.search(conn, MANAGER, "discount authority", limit=20)}
    assert "pricing-guide-managers" in manager
    west = {h.document_id for h in await store.search(conn, WEST_REP, "West depot pilot", limit=20)}
    assert "west-region-field-guide" in west
    assert "pricing-guide-managers" not in west


async def test_another_tenants_documents_are_never_returned(conn: AsyncConnection[Any]) -> None:
    await _sandbox_library(conn)
    fabrikam = Reader(tenant_id=FABRIKAM, roles=["manager"], territories=["West"])
    hits = await store.search(conn, fabrikam, "discount pricing proposal objection negotiation", limit=20)
    assert hits
    assert {h.document_id for h in hits} == {"playbook-negotiation"}
    contoso_ids = {h.chunk_id for h in await store.search(conn, MANAGER, "negotiation", limit=20)}
    assert not contoso_ids & {h.chunk_id for h in hits}


async def test_hybrid_search_fuses_vector_similarity_and_uses_the_hnsw_index(
    conn: AsyncConnection[Any],
) -> None:
    await _sandbox_library(conn)
    model = EmbeddingModel("test:hashing-64", HashingEmbeddings())
    embedded = await store.embed_pending(conn, model)
    cur = await conn.execute("SELECT count(*) AS n FROM knowledge_chunks")
    total = (await cur.fetchone())["n"]  # type: ignore[index]
    assert embedded == total

    # Both rankings contribute: a chunk found by both scores the sum of two RRF terms.
    text_only = await store.search(conn, REP, "renewals term price", limit=5)
    hybrid = await store.search(conn, REP, "renewals term price", limit=5, embeddings=model)
    assert hybrid
    assert text_only
    assert any(h.score > 1.0 / (store.RRF_K + 1) for h in hybrid)  # two rankings summed
    assert {h.document_id for h in hybrid} <= {
        d.document_id
        for d in await store.list_documents(conn, CONTOSO)
        if not d.acl.roles and not d.acl.territories
    }

    statement = store.search_sql(model, 64).as_string(conn)
    await conn.execute("SET enable_seqscan = off")
    cur = await conn.execute(
        "EXPLAIN (FORMAT JSON) " + statement,
        {
            "tenant": REP.tenant_id,
            "groups": REP.groups,
            "roles": REP.roles,
            "territories": REP.territories,
            "q": "renewals term price",
            "limit": 5,
            "vector": "[" + ",".join(["0.125"] * 64) + "]",
        },
    )
    plan = json.dumps((await cur.fetchone())["QUERY PLAN"])  # type: ignore[index]
    assert hnsw_index_name(model.name) in plan


async def test_changing_the_embedding_model_reembeds_every_chunk_and_never_mixes_models(
    conn: AsyncConnection[Any],
) -> None:
    await _sandbox_library(conn)
    first = EmbeddingModel("test:hashing-64", HashingEmbeddings())
    second = EmbeddingModel("test:hashing-32", HashingEmbeddings(dims=32, salt="v2"))
    total = await store.embed_pending(conn, first)
    assert await store.embed_pending(conn, first) == 0  # nothing left for the same model

    assert await store.embed_pending(conn, second) == total
    cur = await conn.execute(
        "SELECT embedding_model, vector_dims(embedding) AS dims, count(*) AS n FROM knowledge_chunks"
        " GROUP BY 1, 2"
    )
    assert [dict(r) for r in await cur.fetchall()] == [
        {"embedding_model": "test:hashing-32", "dims": 32, "n": total}
    ]
    # Searching with the old model finds no vectors of it: the text ranking alone remains.
    hits = await store.search(conn, REP, "negotiation", embeddings=first)
    assert hits
    assert all(h.score <= 1.0 / (store.RRF_K + 1) + 1e-9 for h in hits)


def test_the_knowledge_command_ingests_lists_and_removes_with_clear_errors(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    import psycopg

    from copilot.cli import main

    async def migrated() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
            await migrate(c)

    asyncio.run(migrated())
    monkeypatch.setenv("DATABASE_URL", database_url)
    (tmp_path / "guide.md").write_text("# Guide\n\n## Step\nDo the thing.\n", encoding="utf-8")

    assert (
        main(["knowledge", "ingest", str(tmp_path), "--tenant", CONTOSO, "--acl", "role:manager", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [(d["document_id"], d["outcome"], d["chunks"]) for d in out["documents"]] == [
        ("guide", "added", 1)
    ]
    assert (
        main(
            ["knowledge", "ingest", str(tmp_path / "guide.md"), "--tenant", CONTOSO, "--acl", "role:manager"]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out.startswith("unchanged guide")
    assert "1/1" in captured.err  # the progress bar

    assert main(["knowledge", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["documents"]
    assert [(d["document_id"], d["acl"]["roles"]) for d in listed] == [("guide", ["manager"])]

    assert main(["knowledge", "ingest", str(tmp_path), "--tenant", CONTOSO, "--acl", "colour:blue"]) == 2
    assert "group:NAME, role:NAME or territory:NAME" in capsys.readouterr().err
    assert main(["knowledge", "ingest", str(tmp_path / "missing.md"), "--tenant", CONTOSO]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    assert main(["knowledge", "ingest", str(tmp_path / "notes.txt"), "--tenant", CONTOSO]) == 2
    assert "supported formats" in capsys.readouterr().err

    assert main(["knowledge", "remove", "guide", "--tenant", CONTOSO, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"document_id": "guide", "removed_chunks": 1}
    assert main(["knowledge", "remove", "guide", "--tenant", CONTOSO]) == 2
    assert "no document 'guide'" in capsys.readouterr().err
