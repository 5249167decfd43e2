"""The copilot in a real Teams client emulator: the Microsoft 365 Agents Playground in Chromium.

What a rep does by hand in the Playground, checked against what the sandbox CRM holds
afterwards: a cited answer, an approval card edited and approved (one write, edited
subject), a rejection with a reason (no write), a double click on Approve (one write),
and the approval card at phone size. Screenshots land in ``test-artifacts/e2e/``.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.e2e.harness import Stack, iter_new

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
DECISION_BUTTONS = ["Approve", "Edit…", "Reject…"]
ACCESS_LOG = re.compile(r'"POST /api/messages HTTP/[\d.]+" 200')


def activities(stack: Stack) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = stack.sandbox.admin("GET", "/admin/export")["activities"]
    return rows


def written_by(rows: list[dict[str, Any]], tool_call_id: str) -> list[dict[str, Any]]:
    """Activities the CRM holds for one proposal (its external id ends with the tool call id)."""
    return [row for row in rows if str(row.get("external_id") or "").endswith(f":{tool_call_id}")]


def new_thread(stack: Stack) -> None:
    """Each scenario starts its own copilot thread in the same Teams chat."""
    stack.teams("say", text="start over", expect="Starting a new conversation")


def propose(stack: Stack, text: str) -> str:
    """Ask for a write; wait for its approval card; return the proposal's tool call id."""
    replies = stack.teams("say", text=text, expect="Your approval is needed")["replies"]
    card = next(r["text"] for r in reversed(replies) if "Your approval is needed" in r["text"])
    match = re.search(r"Proposal (call_\w+)", card)
    assert match, f"no proposal id on the card:\n{card}"
    return match.group(1)


def handled_by_bot(stack: Stack) -> int:
    """Activities the bot has finished handling (aiohttp logs each request once answered)."""
    return len(ACCESS_LOG.findall(stack.bot.log.read_text(errors="replace")))


def wait_handled(stack: Stack, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while handled_by_bot(stack) < count:
        assert time.monotonic() < deadline, f"the bot handled {handled_by_bot(stack)} of {count} activities"
        time.sleep(0.1)


def inside(box: dict[str, float] | None, viewport: dict[str, int]) -> bool:
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"]


def test_a_question_gets_a_cited_answer(stack: Stack):
    new_thread(stack)
    replies = stack.teams("say", text="summarise Acme", expect="Sources")["replies"]
    answer = next(r["text"] for r in replies if "Sources" in r["text"])
    stack.teams("screenshot", name="answer-desktop")

    assert "Acme Corporation" in answer
    sources = answer.split("Sources", 1)[1].strip().splitlines()[0]
    citations = [c.strip() for c in sources.split("·") if c.strip()]
    (stack.artifacts / "citations.json").write_text(json.dumps(citations, indent=2))
    print("citations:", citations)
    assert "acc-acme" in citations
    export = stack.sandbox.admin("GET", "/admin/export")
    known = {row["id"] for table in ("accounts", "opportunities", "activities") for row in export[table]}
    assert set(citations) <= known, f"cited ids the CRM does not hold: {set(citations) - known}"
    body = answer.split("Sources", 1)[0]
    assert all(f"[{c}]" in body for c in citations), "every source must back a claim in the answer"
    # Progress reached the Teams client as typing activities before the answer (paced to
    # one update a second, so a fast turn may show only the acknowledgement).
    log = stack.teams("playgroundLog")["lines"]
    assert any("typing" in line for line in log), "\n".join(log[-15:])


def test_edit_and_approve_updates_the_card_and_writes_once(stack: Stack):
    new_thread(stack)
    before = activities(stack)
    call_id = propose(stack, "log a call with Acme — discussed pricing, next step send proposal")
    stack.teams("screenshot", name="approval-card-desktop", card=call_id)

    stack.teams("click", contains=call_id, button="Edit…")
    filled = stack.teams("fill", contains=call_id, label="Subject", value="Pricing call (edited in Teams)")
    assert filled["value"] == "Pricing call (edited in Teams)"
    stack.teams("screenshot", name="edit-card-desktop", card=call_id)
    stack.teams("click", contains=call_id, button="Edit and approve")

    approved = stack.teams("card", contains=f"Proposal {call_id}", text="✓ Approved")
    stack.teams("screenshot", name="approved-card-desktop", card=call_id)
    assert "Pricing call (edited in Teams)" in approved["text"]
    assert approved["buttons"] == [], "a decided card has nothing left to click"

    rows = written_by(activities(stack), call_id)
    assert len(rows) == 1, rows
    assert rows[0]["subject"] == "Pricing call (edited in Teams)"
    assert rows[0]["account_id"] == "acc-acme"
    assert [row["id"] for row in iter_new(before, activities(stack))] == [rows[0]["id"]]


def test_a_rejection_with_a_reason_writes_nothing(stack: Stack):
    new_thread(stack)
    before = activities(stack)
    call_id = propose(stack, "log a meeting with Acme about onboarding")

    stack.teams("click", contains=call_id, button="Reject…")
    stack.teams("fill", contains=call_id, label="Why not?", value="wrong account")
    stack.teams("click", contains=call_id, button="Reject")

    card = stack.teams("card", contains=f"Proposal {call_id}", text="✗ Rejected")["text"]
    stack.teams("screenshot", name="rejected-card-desktop", card=call_id)
    assert "wrong account" in card
    assert "Nothing was written" in card
    assert written_by(activities(stack), call_id) == []
    assert list(iter_new(before, activities(stack))) == []


def test_the_approval_card_is_usable_at_phone_size_and_a_double_click_writes_once(stack: Stack):
    new_thread(stack)
    call_id = propose(stack, "log a task for Acme: send contract")
    stack.teams("screenshot", name="double-click-card-desktop", card=call_id)

    # The Playground itself at phone size: its desktop chrome overflows, the buttons must not.
    stack.teams("viewport", **PHONE)
    stack.teams("screenshot", name="approval-card-phone-playground", card=call_id)
    raw = stack.teams("measure", contains=call_id, buttons=DECISION_BUTTONS)
    # The card given the phone's width, as Teams mobile shows it.
    stack.teams("fitCard", contains=call_id)
    shot = stack.teams("screenshot", name="approval-card-phone", card=call_id)["path"]
    fitted = stack.teams("measure", contains=call_id, buttons=DECISION_BUTTONS)
    stack.teams("restoreLayout")
    stack.teams("viewport", **DESKTOP)
    print("phone layout:", json.dumps({"playground": raw, "fitted": fitted, "screenshot": shot}))

    for layout in (raw, fitted):
        viewport = layout["viewport"]
        assert viewport == PHONE
        approve = layout["buttons"]["Approve"]
        assert approve["visible"], layout
        assert inside(approve["box"], viewport), layout
        assert all(inside(b["box"], viewport) for b in layout["buttons"].values()), layout
    assert inside(fitted["card"], PHONE), f"the card is wider than a phone: {fitted['card']}"
    assert fitted["cardOverflow"] <= 1, "the card's content overflows it sideways at phone width"

    handled = handled_by_bot(stack)
    stack.teams("click", contains=call_id, button="Approve", double=True)
    stack.teams("card", contains=f"Proposal {call_id}", text="✓ Approved")
    wait_handled(stack, handled + 2)  # both clicks reached the bot and were fully handled
    stack.teams("screenshot", name="double-click-approved-desktop", card=call_id)

    rows = written_by(activities(stack), call_id)
    assert len(rows) == 1, rows
    assert rows[0]["subject"] == "Task for Acme Corporation: send contract"


def test_a_thumbs_down_with_a_comment_on_an_answer_is_stored(stack: Stack, e2e_database_url: str):
    """The Playground shows the AI label and 👍 / 👎 on an answer (its Sources card kept, as
    the Playground shows no citation entities on cards); 👎 with a comment reaches the bot as
    Teams' ``message/submitAction`` invoke and is stored with the answer's thread."""
    new_thread(stack)
    stack.teams("say", text="summarise Acme", expect="Sources")
    shown = stack.teams("aiFeatures", contains="Sources")
    stack.teams("screenshot", name="answer-ai-label-feedback-desktop")
    assert shown["aiLabel"], shown
    assert shown["feedbackButtons"] == 1, shown
    stack.teams("viewport", **PHONE)
    stack.teams("fitCard", contains="Sources")  # the card at the phone's width, as Teams mobile shows it
    stack.teams("screenshot", name="answer-ai-label-feedback-phone", card="Sources")
    stack.teams("restoreLayout")
    stack.teams("viewport", **DESKTOP)

    comment = "The summary misses the renewal date"
    stack.teams("feedback", contains="Sources", reaction="dislike", comment=comment, name="feedback-dislike")

    with psycopg.connect(e2e_database_url, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT * FROM answer_feedback ORDER BY id").fetchall()
        answers = conn.execute("SELECT * FROM answers ORDER BY sent_at").fetchall()
    assert [(r["rating"], r["comment"]) for r in rows] == [("dislike", comment)], rows
    # The Playground's invoke names no message: the feedback is the latest answer's.
    latest = answers[-1]
    assert rows[0]["activity_id"] == latest["message_id"], (rows, answers)
    assert rows[0]["thread_id"] == latest["thread_id"]
    assert (rows[0]["tenant_id"], rows[0]["aad_object_id"]) == (latest["tenant_id"], latest["aad_object_id"])
    # The Playground logs the invoke it sent and the bot's status (Teams wants 200).
    log = stack.teams("playgroundLog")["lines"]
    assert any("-> User Application invoke 200" in line for line in log), "\n".join(log[-15:])
