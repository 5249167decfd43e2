"""Adding a write tool is one registry entry: a throwaway tool is interrupted, guarded,
audited and rendered as a valid card without touching any other module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from bot import cards
from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.writes import ProposalRecord, WriteOutcome, WritePlan, WriteTool, register, unregister
from tests.support.adaptive_cards import all_text, inputs, validate_cards
from tests.support.copilot_env import service, sign_in
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

EXECUTED: list[WritePlan] = []


class StickyNoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    account_id: str = Field(min_length=1)
    text: str = Field(min_length=1, max_length=200)
    colour: str | None = Field(default=None, max_length=20)


async def _snapshot(ctx: Any, store: Any, args: dict[str, Any]) -> ProposalRecord:
    account = await ctx.crm.call("get_account", {"account_id": args["account_id"]})
    return {
        "tool": "pin_sticky_note",
        "proposed": dict(args),
        "taken_at": "2026-12-01T00:00:00+00:00",
        "target": {"type": "account", "id": args["account_id"], "name": account.get("name", "")},
        "version": int(account["version"]),
        "current": {},
        "error": None,
    }


async def _check(ctx: Any, plan: WritePlan, snapshot: ProposalRecord | None) -> WritePlan | WriteOutcome:
    return plan


async def _execute(ctx: Any, store: Any, plan: WritePlan) -> WriteOutcome:
    EXECUTED.append(plan)
    return WriteOutcome.done({"note": {"id": f"note-{len(EXECUTED)}", **plan.args.model_dump()}})


def _target(args: BaseModel) -> str | None:
    assert isinstance(args, StickyNoteArgs)
    return args.account_id


@pytest.fixture
def sticky_notes() -> Iterator[WriteTool]:
    EXECUTED.clear()
    tool = register(
        WriteTool(
            name="pin_sticky_note",
            title="Pin a sticky note",
            description="Pin a note to an account. Needs approval.",
            args_schema=StickyNoteArgs,
            backend="store",
            target_type="account",
            target_id=_target,
            editable=("text", "colour"),
            multiline=frozenset({"text"}),
            snapshot=_snapshot,
            check=_check,
            execute=_execute,
        )
    )
    try:
        yield tool
    finally:
        unregister("pin_sticky_note")


async def test_a_write_tool_registered_in_a_test_is_interrupted_guarded_audited_and_carded(
    copilot_settings, sandbox, sticky_notes
):
    model = ScriptedChatModel(steps=[calls(call("pin_sticky_note", account_id="acc-acme", text="Call back"))])
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "pin a note")
        # Interrupted: nothing ran, one proposal waits, with its snapshot.
        assert EXECUTED == []
        [proposal] = asked.proposals
        assert proposal.tool == "pin_sticky_note"
        assert (proposal.record or {}).get("target", {}).get("name")
        # Rendered: a valid approval card with the tool's title and its editable inputs.
        card = cards.approval_card(proposal, thread_id=asked.thread_id)
        editing = cards.approval_card(proposal, thread_id=asked.thread_id, view="edit")
        checked = validate_cards([card, editing])
        assert [c["errors"] for c in checked] == [[], []]
        assert "Pin a sticky note" in all_text(card)
        assert {"edit.text", "edit.colour"} <= {i.get("id") for i in inputs(editing)}
        # Guarded: an edit is re-validated against the tool's own schema.
        with pytest.raises(Exception, match="text"):
            await svc.decide(
                rep.identity,
                rep.broker,
                asked.thread_id,
                [{"tool_call_id": proposal.tool_call_id, "type": "edit", "args": {"text": "x" * 500}}],
            )
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "edit", "args": {"colour": "yellow"}}],
        )
        # Exactly once: a repeat of the same approval returns the stored outcome.
    assert [p.args.model_dump() for p in EXECUTED] == [
        {"account_id": "acc-acme", "text": "Call back", "colour": "yellow"}
    ]
    outcome = done.writes[proposal.tool_call_id]
    assert outcome.status == "done"
    assert outcome.audit_id is not None
    async with connect(copilot_settings) as conn:
        rows = await audit.list_entries(conn, thread_id=asked.thread_id)
    assert [(r.entry.tool, r.entry.decision, r.entry.target_record_id) for r in rows] == [
        ("pin_sticky_note", "edit", "acc-acme")
    ]
    assert rows[0].id == outcome.audit_id


async def test_a_mailbox_outage_during_a_draft_approval_says_so_and_keeps_the_proposal(
    copilot_settings, sandbox
):
    from tests.support.copilot_env import copilot_settings as make_settings

    draft = call("draft_followup_email", contact_id="con-0001", subject="Mailbox outage", body="Hello")
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(draft)])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "draft it")
    call_id = asked.proposals[0].tool_call_id
    assert copilot_settings.database_url is not None
    down = make_settings(
        copilot_settings.database_url.get_secret_value(), sandbox, GRAPH_BASE_URL="http://127.0.0.1:9/v1.0"
    )
    async with service(down, ScriptedChatModel(final="Saved.")) as svc:
        kept = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [{"tool_call_id": call_id, "type": "approve"}]
        )
    assert kept.notice == "mailbox_unavailable"
    assert kept.answer is not None
    assert "mailbox" in kept.answer.lower()
    assert "CRM" not in kept.answer
    assert [p.tool_call_id for p in kept.proposals] == [call_id]

    async with service(copilot_settings, ScriptedChatModel(final="Saved.")) as svc:
        saved = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [{"tool_call_id": call_id, "type": "approve"}]
        )
    assert saved.writes[call_id].status == "done"
    drafts = [
        d for d in sandbox.admin("GET", "/admin/export")["drafts"] if d.get("subject") == "Mailbox outage"
    ]
    assert len(drafts) == 1
