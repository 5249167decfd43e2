"""Knowledge in the agent: the playbook next to the live deal, both cited; restricted
chunks never reach the model, the answer, the checkpoint or the trace of a rep without access.

Real PostgreSQL, the real sandbox over MCP, the offline model (and a scripted model where
the test needs exact tool calls); LangSmith is the project's fake speaking its wire protocol.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from copilot.citations import message_text
from copilot.knowledge.acl import Acl, parse_acl
from copilot.knowledge.ingest import ingest_files
from copilot.knowledge.sources import local_files
from copilot.persistence.database import connect
from copilot.settings import Settings
from sandbox.directory import CONTOSO, FABRIKAM
from tests.support.copilot_env import copilot_settings as make_settings
from tests.support.copilot_env import service, sign_in
from tests.support.fake_langsmith import running_fake_langsmith
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

LIBRARY = Path(__file__).resolve().parents[2] / "sandbox" / "knowledge"
RESTRICTED = ("pricing-guide-managers", "west-region-field-guide")


async def _ingest_library(settings: Settings) -> dict[str, list[str]]:
    """The sandbox library for Contoso (pricing guide: managers; field guide: the West),
    one document for Fabrikam. Returns each document's chunk ids."""
    files = local_files(LIBRARY)
    async with connect(settings) as conn:
        await ingest_files(
            conn, [f for f in files if f.document_id not in RESTRICTED], Acl(tenant_id=CONTOSO.id)
        )
        await ingest_files(
            conn,
            [f for f in files if f.document_id == "pricing-guide-managers"],
            parse_acl(CONTOSO.id, ["role:manager"]),
        )
        await ingest_files(
            conn,
            [f for f in files if f.document_id == "west-region-field-guide"],
            parse_acl(CONTOSO.id, ["territory:West"]),
        )
        await ingest_files(
            conn, [f for f in files if f.document_id == "objection-handling"], Acl(tenant_id=FABRIKAM.id)
        )
        cur = await conn.execute("SELECT document_id, chunk_id, tenant_id FROM knowledge_chunks")
        chunks: dict[str, list[str]] = {}
        for row in await cur.fetchall():
            chunks.setdefault(f"{row['tenant_id']}/{row['document_id']}", []).append(row["chunk_id"])
    return chunks


def _tool_texts(messages: list[Any]) -> list[str]:
    return [message_text(m) for m in messages if isinstance(m, ToolMessage)]


async def _messages(svc: Any, thread_id: str) -> list[Any]:
    saved = await svc.saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    assert saved is not None
    return list(saved.checkpoint["channel_values"]["messages"])


async def test_a_next_step_question_answers_with_the_live_deal_and_its_stage_playbook_both_cited(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    chunks = await _ingest_library(copilot_settings)
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings) as svc:
        result = await svc.run_turn(
            rep.identity, rep.broker, None, "what should I do next on the Acme renewal?"
        )
        messages = await _messages(svc, result.thread_id)

    deal = next(
        o
        for o in sandbox.admin("GET", "/admin/export")["opportunities"]
        if o["name"] == "Acme Corporation — Renewal 2027"
    )
    assert result.answer is not None
    playbook = f"{CONTOSO.id}/playbook-{deal['stage'].lower().replace(' ', '-')}"
    assert deal["id"] in result.citations
    cited_chunks = [c for c in result.citations if c.startswith("kb-")]
    assert cited_chunks
    assert set(cited_chunks) <= set(chunks[playbook]), (cited_chunks, result.answer)
    assert not result.unverified_citations
    assert f"playbook for the {deal['stage']} stage" in result.answer
    # The source of the document citation is described (title) for the card.
    source = result.sources[cited_chunks[0]]
    assert (source.name, source.kind) == (f"{deal['stage']} stage playbook", "knowledge")
    assert source.url is not None
    assert source.url.endswith(f"{playbook.split('/')[1]}.md")
    assert any('"kb-' in text for text in _tool_texts(messages))


async def test_a_document_citation_not_returned_in_this_run_is_flagged(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    chunks = await _ingest_library(copilot_settings)
    real = chunks[f"{CONTOSO.id}/playbook-negotiation"][0]
    model = ScriptedChatModel(
        steps=[
            calls(call("search_knowledge", query="negotiation playbook")),
            AIMessage(content=f"Trade, never concede [{real}]. Also see [kb-0000000000-9]."),
        ]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "negotiation tips")
    assert result.citations == [real]
    assert result.unverified_citations == ["kb-0000000000-9"]


async def test_restricted_chunks_never_reach_the_model_the_answer_or_the_trace_of_a_rep_without_access(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    chunks = await _ingest_library(copilot_settings)
    restricted_ids = (
        chunks[f"{CONTOSO.id}/pricing-guide-managers"] + chunks[f"{FABRIKAM.id}/objection-handling"]
    )
    secret_phrases = ("migration credit", "regional director and finance", "Sales managers may approve")
    with running_fake_langsmith() as fake:
        assert copilot_settings.database_url is not None
        traced = make_settings(
            copilot_settings.database_url.get_secret_value(),
            sandbox,
            LANGSMITH_TRACING=True,
            LANGSMITH_ENDPOINT=fake.url,
            LANGSMITH_PROJECT="knowledge-acl",
            COPILOT_TRACE_PSEUDONYM_KEY=base64.b64encode(b"k" * 32).decode(),
        )
        # diego: a Contoso rep in the East: no manager role, not the West.
        rep = await sign_in(traced, "diego")
        assert "manager" not in rep.identity.roles
        model = ScriptedChatModel(
            steps=[
                calls(
                    call("search_knowledge", query="pricing guide discount authority competitor credit"),
                    call("search_knowledge", query="objection handling too expensive"),
                ),
                AIMessage(content="Here is what I found."),
            ]
        )
        async with service(traced, model) as svc:
            scripted = await svc.run_turn(rep.identity, rep.broker, None, "what discount can I give?")
            scripted_messages = await _messages(svc, scripted.thread_id)
        async with service(traced) as svc:  # the offline model, planning its own search
            offline = await svc.run_turn(
                rep.identity, rep.broker, None, "what does the pricing guide say about discount authority?"
            )
            offline_messages = await _messages(svc, offline.thread_id)
        sent = fake.all_bytes()

    seen_by_model = [message_text(m) for received in model.received for m in received]
    tool_texts = _tool_texts(scripted_messages) + _tool_texts(offline_messages)
    assert any('"kb-' in t for t in tool_texts), "the searches returned the chunks the rep may read"
    everything = [
        *seen_by_model,
        *tool_texts,
        scripted.answer or "",
        offline.answer or "",
        json.dumps(scripted.citations + offline.citations),
    ]
    assert sent, "the turns were traced"
    for ident in restricted_ids:
        assert all(ident not in text for text in everything), ident
        assert ident.encode() not in sent, ident
    for phrase in secret_phrases:
        assert all(phrase not in text for text in everything), phrase
        assert phrase.encode() not in sent, phrase

    # The same question from a manager does reach the pricing guide: the check is on access.
    nestor = await sign_in(copilot_settings, "nestor")
    async with service(copilot_settings) as svc:
        manager = await svc.run_turn(
            nestor.identity, nestor.broker, None, "what does the pricing guide say about discount authority?"
        )
    assert set(manager.citations) & set(chunks[f"{CONTOSO.id}/pricing-guide-managers"])


async def test_the_sandbox_drive_is_ingested_over_graph_with_each_files_permissions_as_its_acl(
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import asyncio

    from copilot.cli import main
    from copilot.knowledge.acl import Reader
    from copilot.knowledge.store import list_documents, search

    admin = await sign_in(copilot_settings, "nestor")
    token = await admin.broker._token([f"{copilot_settings.graph_resource}/Sites.Read.All"])
    monkeypatch.setenv("KNOWLEDGE_GRAPH_TOKEN", token)
    assert copilot_settings.database_url is not None
    monkeypatch.setenv("DATABASE_URL", copilot_settings.database_url.get_secret_value())
    listing = f"{sandbox.settings.http_base_url}/v1.0/sites/root/drive/root/children"

    # Outside the event loop: the command runs its own.
    code = await asyncio.to_thread(
        main,
        [
            "knowledge",
            "ingest",
            listing,
            "--tenant",
            CONTOSO.id,
            "--bearer-env",
            "KNOWLEDGE_GRAPH_TOKEN",
            "--json",
        ],
    )
    assert code == 0, capsys.readouterr().err
    ingested = json.loads(capsys.readouterr().out)["documents"]
    assert {d["document_id"] for d in ingested} == {p.stem for p in LIBRARY.glob("*.md")}
    assert all(d["source_url"].startswith(sandbox.settings.http_base_url) for d in ingested)

    async with connect(copilot_settings) as conn:
        acls = {d.document_id: d.acl.groups for d in await list_documents(conn, CONTOSO.id)}
        assert acls["pricing-guide-managers"] == ["sales-managers"]
        assert acls["west-region-field-guide"] == ["sales-west"]
        assert acls["playbook-proposal"] == ["sales"]
        diego = (await sign_in(copilot_settings, "diego")).identity
        alex = (await sign_in(copilot_settings, "alex")).identity
        found_by = {
            who: {
                h.document_id
                for h in await search(conn, Reader.of(ident), "pricing discount West depot pilot", limit=20)
            }
            for who, ident in (("diego", diego), ("alex", alex), ("nestor", admin.identity))
        }
    assert "pricing-guide-managers" not in found_by["diego"] | found_by["alex"]
    assert "west-region-field-guide" in found_by["alex"]
    assert "west-region-field-guide" not in found_by["diego"]
    assert "pricing-guide-managers" in found_by["nestor"]

    # Without a token, or with none in the variable: a clear error, exit 2, nothing ingested.
    monkeypatch.setenv("EMPTY_TOKEN", "")
    assert await asyncio.to_thread(main, ["knowledge", "ingest", listing, "--tenant", CONTOSO.id]) == 2
    assert "--bearer-env" in capsys.readouterr().err
    assert (
        await asyncio.to_thread(
            main, ["knowledge", "ingest", listing, "--tenant", CONTOSO.id, "--bearer-env", "EMPTY_TOKEN"]
        )
        == 2
    )
    assert "holds no token" in capsys.readouterr().err
