"""The copilot in a real Teams client emulator: the Microsoft 365 Agents Playground in Chromium.

What a rep does by hand in the Playground, checked against what the sandbox CRM holds
afterwards: a cited answer, an approval card edited and approved (one write, edited
subject), a rejection with a reason (no write), a double click on Approve (one write),
the approval card at phone size (also with its Edit panel open), a question asked while a
proposal waits (answered; the card stays, live, and is not posted again), "my
approvals" (opened from the welcome card; one proposal opened into its card, whose older
copy loses its buttons, and decided there), and an approved update undone from its card's
Undo button (the undo's own approval card approved; the CRM as before), the deals-at-risk and
what-changed cards (cited, inside a phone's width), and a document
restricted to the West territory answered to Alex (West) and withheld from Diego (East), who
chats in a second Playground signed in as him. Screenshots at 1280×800 and 390×844 land in
``test-artifacts/e2e/``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.rows import dict_row

from bot import brief_store
from bot.brief_delivery import DeliveryReport, deliver_briefs
from bot.cards import BRIEF_ELEMENT_PREFIX, DIGEST_ELEMENT_PREFIX, brief_log_request, card_element_id
from bot.digest_delivery import DigestReport, deliver_digests
from bot.digests import rep_digest
from bot.proactive_reps import proactive_rep
from bot.runtime import BotRuntime, open_runtime
from bot.settings import BotSettings
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.service import briefs_at
from copilot.briefs.types import Brief, Digest
from copilot.persistence.database import connect
from copilot.redaction import detect_email, detect_phone_numbers
from sandbox.directory import find_user
from tests.e2e.harness import PlaygroundDriver, Stack, find_chromium, iter_new, start_playground
from tests.integration.test_bot_identity import ingest_west_guide
from tests.support.copilot_env import copilot_settings, sign_in
from tests.support.sandbox_process import free_port
from tests.support.working_hours import working_hours

T = TypeVar("T")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

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
    """Ask for a write; wait for its approval card; return the proposal's tool call id.

    The id is the card's data (its ``proposal-…`` element id), never its visible text.
    """
    replies = stack.teams("say", text=text, expect="Your approval is needed")["replies"]
    card = next(r for r in reversed(replies) if "Your approval is needed" in r["text"])
    assert len(card["ids"]) == 1, f"one proposal id in the card's data: {card}"
    call_id: str = card["ids"][0]
    assert call_id not in card["text"], "the proposal id is internal: not shown on the card"
    return call_id


def set_by_saying(stack: Stack, text: str, expect: str) -> None:
    """Ask for a brief/digest setting in the rep's words and approve its card: ``expect`` is
    what the approved card then says the setting is."""
    call_id = propose(stack, text)
    stack.teams("click", cardId=of(call_id), button="Approve")
    stack.teams("card", cardId=of(call_id), text=expect)


def of(call_id: str) -> str:
    """The element id every card about one proposal carries (``bot.cards.card_element_id``)."""
    return card_element_id(call_id)


def handled_by_bot(stack: Stack) -> int:
    """Activities the bot has finished handling (aiohttp logs each request once answered)."""
    return len(ACCESS_LOG.findall(stack.bot.log.read_text(errors="replace")))


def wait_handled(stack: Stack, count: int, timeout: float = 120) -> None:
    # Generous: on a loaded CI machine the second click of a double click waits for the first
    # decision's run lock and its card update before it is logged as handled.
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
    stack.teams("screenshot", name="approval-card-desktop", card={"cardId": of(call_id)})

    stack.teams("click", cardId=of(call_id), button="Edit…")
    stack.teams("card", cardId=of(call_id), text="Your changes")
    filled = stack.teams("fill", cardId=of(call_id), label="Subject", value="Pricing call (edited in Teams)")
    assert filled["value"] == "Pricing call (edited in Teams)"
    stack.teams("screenshot", name="edit-card-desktop", card={"cardId": of(call_id)})
    stack.teams("click", cardId=of(call_id), button="Edit and approve")

    approved = stack.teams("card", cardId=of(call_id), text="✓ Approved")
    stack.teams("screenshot", name="approved-card-desktop", card={"cardId": of(call_id)})
    assert "Pricing call (edited in Teams)" in approved["text"]
    assert approved["buttons"] == ["Undo"], "a decided card has no decision left to click, only Undo"
    assert call_id not in approved["text"], "no internal proposal id on the card"
    assert "Audit record" not in approved["text"], "no internal audit number on the card"

    rows = written_by(activities(stack), call_id)
    assert len(rows) == 1, rows
    assert rows[0]["subject"] == "Pricing call (edited in Teams)"
    assert rows[0]["account_id"] == "acc-acme"
    assert [row["id"] for row in iter_new(before, activities(stack))] == [rows[0]["id"]]


def test_a_rejection_with_a_reason_writes_nothing(stack: Stack):
    new_thread(stack)
    before = activities(stack)
    call_id = propose(stack, "log a meeting with Acme about onboarding")

    stack.teams("click", cardId=of(call_id), button="Reject…")
    stack.teams("card", cardId=of(call_id), text="Why not?")
    stack.teams("fill", cardId=of(call_id), label="Why not?", value="wrong account")
    stack.teams("click", cardId=of(call_id), button="Reject")

    card = stack.teams("card", cardId=of(call_id), text="✗ Rejected")["text"]
    stack.teams("screenshot", name="rejected-card-desktop", card={"cardId": of(call_id)})
    assert "wrong account" in card
    assert "Nothing was written" in card
    assert written_by(activities(stack), call_id) == []
    assert list(iter_new(before, activities(stack))) == []


def test_the_approval_card_is_usable_at_phone_size_and_a_double_click_writes_once(stack: Stack):
    new_thread(stack)
    call_id = propose(stack, "log a task for Acme: send contract")
    stack.teams("screenshot", name="double-click-card-desktop", card={"cardId": of(call_id)})

    # The Playground itself at phone size: its desktop chrome overflows, the buttons must not.
    stack.teams("viewport", **PHONE)
    stack.teams("screenshot", name="approval-card-phone-playground", card={"cardId": of(call_id)})
    raw = stack.teams("measure", cardId=of(call_id), buttons=DECISION_BUTTONS)
    # The card given the phone's width, as Teams mobile shows it.
    stack.teams("fitCard", cardId=of(call_id))
    shot = stack.teams("screenshot", name="approval-card-phone", card={"cardId": of(call_id)})["path"]
    fitted = stack.teams("measure", cardId=of(call_id), buttons=DECISION_BUTTONS)
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
    stack.teams("click", cardId=of(call_id), button="Approve", double=True)
    stack.teams("card", cardId=of(call_id), text="✓ Approved")
    wait_handled(stack, handled + 2)  # both clicks reached the bot and were fully handled
    stack.teams("screenshot", name="double-click-approved-desktop", card={"cardId": of(call_id)})

    rows = written_by(activities(stack), call_id)
    assert len(rows) == 1, rows
    assert rows[0]["subject"] == "Task for Acme Corporation: send contract"


def at_phone_size(stack: Stack, name: str, **card: Any) -> dict[str, Any]:
    """A screenshot of a card at 390×844, given the phone's width as Teams mobile does."""
    stack.teams("viewport", **PHONE)
    stack.teams("fitCard", **card)
    stack.teams("screenshot", name=name, card=card)
    fitted = stack.teams("measure", **card)
    stack.teams("restoreLayout")
    stack.teams("viewport", **DESKTOP)
    return fitted


def test_a_question_while_a_proposal_waits_is_answered_and_the_card_stays_live(stack: Stack):
    new_thread(stack)
    before = activities(stack)
    call_id = propose(stack, "log a call with Acme about the renewal terms")

    replies = stack.teams("say", text="summarise Acme", expect="still waits")["replies"]
    answer = next(r["text"] for r in replies if "still waits" in r["text"])
    stack.teams("screenshot", name="question-while-pending-desktop")
    fitted = at_phone_size(stack, "question-while-pending-phone", contains="still waits")

    assert "Acme Corporation" in answer
    assert "1 proposal still waits for your decision on its card." in answer
    assert not any(r["ids"] for r in replies), "no approval card was posted again"
    assert stack.teams("countCards", cardId=of(call_id))["count"] == 1
    card = stack.teams("card", cardId=of(call_id))
    assert [b for b in card["buttons"] if b in DECISION_BUTTONS] == DECISION_BUTTONS, card
    assert fitted["cardOverflow"] <= 1

    stack.teams("click", cardId=of(call_id), button="Approve")
    stack.teams("card", cardId=of(call_id), text="✓ Approved")
    assert len(written_by(activities(stack), call_id)) == 1
    assert len(list(iter_new(before, activities(stack)))) == 1


def test_my_approvals_opens_a_proposal_whose_old_card_loses_its_buttons_and_decides_it(stack: Stack):
    new_thread(stack)
    older = propose(stack, "log a task for Acme: send the pricing sheet")
    new_thread(stack)
    newer = propose(stack, "log a meeting with Acme about the security review")

    # From the welcome card's button (the first message of the chat).
    stack.teams("click", contains="Hi! I help you work your pipeline", button="my approvals")
    listing = stack.teams("card", contains="My approvals", text="wait")
    stack.teams("screenshot", name="my-approvals-desktop", card="My approvals")
    fitted = at_phone_size(stack, "my-approvals-phone", contains="My approvals")
    assert fitted["cardOverflow"] <= 1
    text = listing["text"]
    assert text.index("security review") < text.index("pricing sheet"), "newest first"
    assert "ago" in text
    assert "Approve" not in listing["buttons"], "decisions only on the proposal's own card"
    assert older not in text
    assert newer not in text

    stack.teams("click", contains="My approvals", within=f"waiting-{older}", button="Open")
    moved = stack.teams("card", cardId=of(older), which="first", text="Moved further down")
    live = stack.teams("card", cardId=of(older), which="last", text="Your approval is needed")
    stack.teams("screenshot", name="superseded-card-desktop", card={"cardId": of(older), "which": "first"})
    assert moved["buttons"] == [], "the superseded copy has nothing left to click"
    assert [b for b in live["buttons"] if b in DECISION_BUTTONS] == DECISION_BUTTONS
    assert stack.teams("countCards", cardId=of(older))["count"] == 2

    stack.teams("click", cardId=of(older), which="last", button="Approve")
    approved = stack.teams("card", cardId=of(older), which="last", text="✓ Approved")
    stack.teams("screenshot", name="approved-from-my-approvals-desktop", card={"cardId": of(older)})
    assert approved["buttons"] == ["Undo"]
    assert len(written_by(activities(stack), older)) == 1
    assert written_by(activities(stack), newer) == []

    # Leave nothing waiting for the other scenarios.
    stack.teams("click", cardId=of(newer), button="Reject…")
    stack.teams("card", cardId=of(newer), text="Why not?")
    stack.teams("fill", cardId=of(newer), label="Why not?", value="not now")
    stack.teams("click", cardId=of(newer), button="Reject")
    stack.teams("card", cardId=of(newer), text="✗ Rejected")


def test_an_open_edit_panel_survives_the_card_being_laid_out_again_at_phone_width(stack: Stack):
    """A resize makes the Playground lay its chat out again and render every card anew: a
    client-side panel (``Action.ShowCard``) would collapse, and the rep's edit with it. The
    Edit panel is the card itself (the bot updated it), so it is still open afterwards."""
    new_thread(stack)
    call_id = propose(stack, "log a call with Acme about the onboarding plan")
    labels = ["Subject", "Notes", "Account"]
    stack.teams("click", cardId=of(call_id), button="Edit…")
    stack.teams("card", cardId=of(call_id), text="Your changes")
    desktop = stack.teams("measure", cardId=of(call_id), labels=labels, buttons=["Edit and approve"])
    stack.teams("screenshot", name="edit-panel-desktop", card={"cardId": of(call_id)})

    stack.teams("viewport", **PHONE)
    stack.teams("fitCard", cardId=of(call_id))
    stack.teams("screenshot", name="edit-panel-phone", card={"cardId": of(call_id)})
    phone = stack.teams("measure", cardId=of(call_id), labels=labels, buttons=["Edit and approve", "Back"])
    stack.teams("fill", cardId=of(call_id), label="Subject", value="Onboarding plan (edited on a phone)")
    stack.teams("restoreLayout")
    stack.teams("viewport", **DESKTOP)

    assert phone["inputs"]["Notes"]["value"] == "The onboarding plan", "prefilled with the proposed value"
    for label in labels:
        assert phone["inputs"][label]["value"] == desktop["inputs"][label]["value"], label
        assert phone["inputs"][label]["visible"], phone
        assert inside(phone["inputs"][label]["box"], PHONE), phone
    for button in phone["buttons"].values():
        assert button["visible"], phone
        assert inside(button["box"], PHONE), phone
    assert phone["cardOverflow"] <= 1

    # Back at desktop width, laid out again: the panel is still open, and it decides.
    stack.teams("card", cardId=of(call_id), text="Your changes")
    stack.teams("fill", cardId=of(call_id), label="Subject", value="Onboarding plan (edited in Teams)")
    stack.teams("click", cardId=of(call_id), button="Edit and approve")
    stack.teams("card", cardId=of(call_id), text="✓ Approved")
    rows = written_by(activities(stack), call_id)
    assert [r["subject"] for r in rows] == ["Onboarding plan (edited in Teams)"]


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


def opportunity(stack: Stack, opportunity_id: str) -> dict[str, Any]:
    found: dict[str, Any] = stack.sandbox.call("alex", "get_opportunity", opportunity_id=opportunity_id)[
        "structuredContent"
    ]
    return found


def test_an_approved_update_is_undone_from_its_card_and_the_crm_is_as_before(stack: Stack):
    new_thread(stack)
    before = opportunity(stack, "opp-acme-expansion")
    call_id = propose(stack, "move the Acme fleet expansion deal to Negotiation")
    stack.teams("click", cardId=of(call_id), button="Approve")
    approved = stack.teams("card", cardId=of(call_id), text="✓ Approved")
    assert approved["buttons"] == ["Undo"]
    changed = opportunity(stack, "opp-acme-expansion")
    assert changed["stage"] == "Negotiation"
    assert changed["version"] == before["version"] + 1

    # Undo starts a turn that proposes the undo: its own approval card, current vs restored.
    stack.teams("click", cardId=of(call_id), button="Undo")
    undo = stack.teams("card", contains="Undo a change", text="Your approval is needed")
    stack.teams("screenshot", name="undo-approval-card-desktop", card="Undo a change")
    assert "Restored" in undo["text"]
    assert before["stage"] in undo["text"]
    assert undo["buttons"] == ["Approve", "Reject…"]
    assert opportunity(stack, "opp-acme-expansion")["stage"] == "Negotiation", (
        "nothing undone before approval"
    )

    stack.teams("click", contains="Undo a change", button="Approve")
    done = stack.teams("card", contains="Undo a change", text="✓ Approved")
    assert done["buttons"] == [], "an undo is not undone again"
    after = opportunity(stack, "opp-acme-expansion")
    fields = ("stage", "amount", "close_date", "next_step", "probability")
    assert {k: after[k] for k in fields} == {k: before[k] for k in fields}
    assert after["version"] == before["version"] + 2


# --- the rep's whole identity: restricted knowledge -------------------------------------------

DIEGO_PLAYGROUND_CONFIG = """\
version: "0.1.1"
tenantId: 00000000-0000-0000-0000-000000000001
bot:
  id: 00000000-0000-0000-0000-00000000000011
  name: Test Bot
currentUser:
  id: user-id-diego
  name: Diego Siciliani
  userPrincipleName: diego@contoso.example
  aadObjectId: {aad}
  givenName: Diego
  surname: Siciliani
  email: diego@contoso.example
users:
  - id: user-id-1
    name: Alex Wilber
    userPrincipleName: alex@contoso.example
    aadObjectId: 00000000-0000-0000-0000-0000000000021
    givenName: Alex
    surname: Wilber
    email: alex@contoso.example
  - id: user-id-2
    name: Megan Bowen
    userPrincipleName: megan@contoso.example
    aadObjectId: 00000000-0000-0000-0000-0000000000022
    givenName: Megan
    surname: Bowen
    email: megan@contoso.example
  - id: user-id-3
    name: Adele Vance
    userPrincipleName: adele@contoso.example
    aadObjectId: 00000000-0000-0000-0000-0000000000023
    givenName: Adele
    surname: Vance
    email: adele@contoso.example
  - id: user-id-4
    name: Lidia Holloway
    userPrincipleName: lidia@contoso.example
    aadObjectId: 00000000-0000-0000-0000-0000000000024
    givenName: Lidia
    surname: Holloway
    email: lidia@contoso.example
  - id: user-id-5
    name: Nestor Wilke
    userPrincipleName: nestor@contoso.example
    aadObjectId: 00000000-0000-0000-0000-0000000000025
    givenName: Nestor
    surname: Wilke
    email: nestor@contoso.example
personalChat:
  id: __PERSONAL_CHAT_ID__
groupChat:
  id: __GROUP_CHAT_ID__
  name: Group Chat
team:
  id: team-id
  name: My Team
  aadGroupId: 00000000-0000-0000-0000-000000000031
  channels:
    - id: channel-announcements-id
      name: Announcements
"""
"""The Playground's own config file (``.m365agentsplayground.yml`` in its working directory),
with Diego as its signed-in user instead of Alex Wilber (the other users, five at least as
its schema requires, only fill its roster)."""


@pytest.fixture
def west_guide_ingested(e2e_database_url: str, stack: Stack) -> None:
    """The West field guide, readable by the West territory only, in the bot's database."""
    settings = copilot_settings(e2e_database_url, stack.sandbox)
    asyncio.run(ingest_west_guide(settings))


@pytest.fixture
def diego_playground(stack: Stack, tmp_path: Path) -> Iterator[PlaygroundDriver]:
    """A second Agents Playground on the same bot, its user Diego (Contoso, East territory)."""
    diego = find_user("diego")
    assert diego is not None
    (tmp_path / ".m365agentsplayground.yml").write_text(
        DIEGO_PLAYGROUND_CONFIG.format(aad=diego.aad_object_id)
    )
    bot_url = stack.bot_url
    playground, url = start_playground(
        bot_url, free_port(), tmp_path, stack.artifacts / "playground-diego.log"
    )
    (stack.artifacts / "diego").mkdir(exist_ok=True)
    driver = PlaygroundDriver(stack.artifacts / "diego")
    try:
        driver(
            "launch",
            wait=90,
            url=url,
            width=1280,
            height=800,
            artifactsDir=str(stack.artifacts),
            executablePath=find_chromium(),
        )
        yield driver
    finally:
        driver.close()
        playground.stop()


def test_a_west_only_document_is_answered_to_a_west_rep_and_withheld_from_an_east_rep(
    stack: Stack, west_guide_ingested: None, diego_playground: PlaygroundDriver
):
    question = "what does the West region field guide say about the depot pilot?"
    new_thread(stack)
    replies = stack.teams("say", text=question, expect="60-day pilot")["replies"]
    stack.teams("screenshot", name="restricted-document-answered-west-rep")
    alex_answer = next(r["text"] for r in replies if "60-day pilot" in r["text"])

    replies = diego_playground("say", text=question, expect="playbooks and product documents")["replies"]
    diego_playground("screenshot", name="restricted-document-withheld-east-rep")
    diego_answer = "\n".join(r["text"] for r in replies)

    assert "West region field guide" in alex_answer
    assert "60-day pilot" not in diego_answer, diego_answer
    assert "West region field guide" not in diego_answer, diego_answer
    assert (stack.artifacts / "restricted-document-answered-west-rep.png").exists()
    assert (stack.artifacts / "restricted-document-withheld-east-rep.png").exists()


# --- the copilot speaks first: a proactive meeting prep brief ----------------------------------


def seeded_day(stack: Stack) -> dt.datetime:
    """Midnight (UTC) of the day the sandbox seeded its calendar from (its meetings follow it)."""
    events: list[dict[str, Any]] = stack.sandbox.admin("GET", "/admin/export")["events"]
    first = min(dt.datetime.fromisoformat(e["start_at"].replace("Z", "+00:00")) for e in events)
    return first.replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture
def alex_always_at_work(stack: Stack) -> Iterator[None]:
    """alex works around the clock, every day, in UTC: the timers hold nothing for quiet hours
    or a day off at the seeded meetings' moments (whichever weekday the sandbox seeded from)."""
    with working_hours(stack.sandbox, "alex"):
        yield


def with_bot_runtime(stack: Stack, database_url: str, work: Callable[[BotRuntime], Awaitable[T]]) -> T:
    """Run ``work`` on a bot runtime of its own against the bot's database and the stack's
    sandbox, as a Functions timer opens one (local development mode, as the Playground's bot runs)."""

    async def run() -> T:
        settings = copilot_settings(database_url, stack.sandbox)
        async with open_runtime(settings, BotSettings(MicrosoftAppId="")) as runtime:
            return await work(runtime)

    return asyncio.run(run())


def brief_timer(stack: Stack, database_url: str, *, at: dt.datetime, lead_minutes: int) -> DeliveryReport:
    """One run of the brief timer's own code (``deliver_briefs``) against the bot's database:
    the brief goes out proactively, through the 1:1 chat kept for the rep ("brief on" approved), to
    the Playground's Bot Connector endpoint, as the Functions timer posts it to Teams."""

    async def run(runtime: BotRuntime) -> DeliveryReport:
        return await deliver_briefs(runtime, at=at, lead_minutes=lead_minutes)

    return with_bot_runtime(stack, database_url, run)


def test_a_proactive_brief_card_cites_what_it_shows_and_log_this_meeting_writes_once(
    stack: Stack, e2e_database_url: str, alex_always_at_work: None
):
    new_thread(stack)
    set_by_saying(stack, "brief on", "Meeting prep briefs are on")
    events = stack.sandbox.admin("GET", "/admin/export")["events"]
    acme = next(e for e in events if e["subject"] == "Acme renewal pricing review")
    start = dt.datetime.fromisoformat(acme["start_at"].replace("Z", "+00:00"))
    at = start - dt.timedelta(minutes=30)

    report = brief_timer(stack, e2e_database_url, at=at, lead_minutes=60)
    posted = [meeting for _, meeting in report.posted]
    assert str(acme["id"]) in posted, report
    meeting_id = str(acme["id"])
    element = f"{BRIEF_ELEMENT_PREFIX}{meeting_id}"
    shown = stack.teams("card", cardId=element, text="Sources")
    stack.teams("screenshot", name="brief-card-desktop", card={"cardId": element})
    # Posted before the meeting: "Log this meeting" is offered only once it has started.
    assert shown["buttons"][-1:] == ["Draft follow-up"], shown
    assert "Log this meeting" not in shown["buttons"], shown

    # The very brief the timer composed: each id it cites is on the card, where the rep sees it.
    async def compose() -> Brief:
        settings = copilot_settings(e2e_database_url, stack.sandbox)
        rep = await sign_in(settings, "alex")
        async with connect(settings) as conn:
            run = await briefs_at(settings, rep.identity, rep.broker, conn, at=at, lead_minutes=60)
        return next(b for b in run.briefs if b.meeting_id == meeting_id)

    brief = asyncio.run(compose())
    assert brief.citations, brief
    missing = [c for c in brief.citations if c not in shown["text"]]
    assert missing == [], f"cited ids not visible on the brief card: {missing}"
    assert detect_email(shown["text"]) == [], shown["text"]
    assert detect_phone_numbers(shown["text"]) == [], shown["text"]

    fitted = at_phone_size(stack, "brief-card-phone", cardId=element, buttons=["Draft follow-up"])
    assert fitted["buttons"]["Draft follow-up"]["visible"], fitted
    assert inside(fitted["buttons"]["Draft follow-up"]["box"], PHONE), fitted
    assert inside(fitted["card"], PHONE), fitted
    assert fitted["cardOverflow"] <= 1, fitted

    # A second run of the timer posts nothing again (one brief per meeting per rep).
    again = brief_timer(stack, e2e_database_url, at=at, lead_minutes=60)
    assert again.posted == [], again
    assert again.already_posted >= 1, again
    assert stack.teams("countCards", cardId=element)["count"] == 1

    before = activities(stack)
    # What "Log this meeting" sends once the meeting has started.
    stack.teams(
        "say",
        text=brief_log_request("Acme Corporation", "Acme renewal pricing review"),
        expect="Your approval is needed",
    )
    stack.teams("card", contains="Your approval is needed", text="Acme renewal pricing review")
    [card] = [m for m in stack.teams("messages")["messages"] if m["ids"]][-1:]
    [call_id] = card["ids"]
    stack.teams("screenshot", name="brief-log-meeting-approval-desktop", card={"cardId": of(call_id)})
    handled = handled_by_bot(stack)
    stack.teams("click", cardId=of(call_id), button="Approve", double=True)
    stack.teams("card", cardId=of(call_id), text="✓ Approved")
    wait_handled(stack, handled + 2)

    rows = written_by(activities(stack), call_id)
    assert len(rows) == 1, rows
    assert rows[0]["account_id"] == "acc-acme"
    assert [row["id"] for row in iter_new(before, activities(stack))] == [rows[0]["id"]]
    for name in ("brief-card-desktop", "brief-card-phone", "brief-log-meeting-approval-desktop"):
        assert (stack.artifacts / f"{name}.png").exists(), name


# --- the copilot speaks first: the daily digest --------------------------------------------------


def digest_timer(stack: Stack, database_url: str, *, at: dt.datetime) -> DigestReport:
    """One run of the digest timer's own code (``deliver_digests``), as ``brief_timer`` runs
    the brief timer's: the digest goes to the Playground through the 1:1 chat kept for the rep."""

    async def run(runtime: BotRuntime) -> DigestReport:
        return await deliver_digests(runtime, at=at)

    return with_bot_runtime(stack, database_url, run)


def composed_digest(stack: Stack, database_url: str, *, at: dt.datetime) -> Digest:
    """The digest the timer composes for its one subscriber at ``at``: the same rep, schedule
    and ``rep_digest`` the timer uses, composed again (nothing is posted)."""

    async def compose(runtime: BotRuntime) -> Digest:
        pool = runtime.service.pool
        [sub] = await brief_store.subscribers(pool, digest=True)
        rep = await proactive_rep(runtime, sub.tenant_id, sub.aad_object_id, sub.reference)
        assert rep is not None, "alex is signed in (local development mode)"
        schedule = await rep_schedule(runtime.settings, rep.broker, sub.preferences.time_zone)
        return await rep_digest(runtime.settings, pool, runtime.service, rep, schedule, at=at)

    return with_bot_runtime(stack, database_url, compose)


def test_the_daily_digest_card_cites_what_it_shows_fits_a_phone_and_not_useful_is_stored(
    stack: Stack, e2e_database_url: str, alex_always_at_work: None
):
    new_thread(stack)
    set_by_saying(stack, "digest on", "the daily digest is on")
    # The day of the Acme renewal meeting (the seeded day's next), at alex's digest time (07:30,
    # the default; alex's day is UTC here), so the digest has a customer meeting to list.
    at = seeded_day(stack) + dt.timedelta(days=1, hours=7, minutes=30)
    day = at.date()

    report = digest_timer(stack, e2e_database_url, at=at)
    assert [posted for _, posted in report.posted] == [day], report
    element = f"{DIGEST_ELEMENT_PREFIX}{day.isoformat()}"
    shown = stack.teams("card", cardId=element, text="Sources")
    stack.teams("screenshot", name="digest-card-desktop", card={"cardId": element})
    assert "Acme renewal pricing review" in shown["text"], shown["text"]
    # The digest's own buttons come last, after its suggestions' (Move the close date, Not now…).
    assert shown["buttons"][-2:] == ["Not useful", "Snooze…"], shown

    # The digest the timer composed: each id it cites is on the card, where the rep sees it.
    digest = composed_digest(stack, e2e_database_url, at=at)
    assert digest.day == day
    assert digest.citations, digest
    missing = [c for c in digest.citations if c not in shown["text"]]
    assert missing == [], f"cited ids not visible on the digest card: {missing}"
    assert detect_email(shown["text"]) == [], shown["text"]
    assert detect_phone_numbers(shown["text"]) == [], shown["text"]

    buttons = list(dict.fromkeys(shown["buttons"]))  # the last of each, the lowest on the card
    fitted = at_phone_size(stack, "digest-card-phone", cardId=element, buttons=buttons)
    for button in buttons:
        assert fitted["buttons"][button]["visible"], fitted
        assert inside(fitted["buttons"][button]["box"], PHONE), fitted
    assert inside(fitted["card"], PHONE), fitted
    assert fitted["cardOverflow"] <= 1, fitted

    # A second run the same day posts nothing (one digest per rep per local day).
    again = digest_timer(stack, e2e_database_url, at=at + dt.timedelta(minutes=15))
    assert again.posted == [], again
    assert again.already_posted == 1, again
    assert stack.teams("countCards", cardId=element)["count"] == 1

    stack.teams("click", cardId=element, button="Not useful")
    stack.teams("card", contains="Thanks for telling me", text="not useful")
    alex = find_user("alex")
    assert alex is not None
    with psycopg.connect(e2e_database_url, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT * FROM digest_feedback ORDER BY id").fetchall()
    assert [(r["aad_object_id"], r["day"], r["kind"], r["record_id"]) for r in rows] == [
        (alex.aad_object_id, day, "not_useful", "")
    ], rows
    for name in ("digest-card-desktop", "digest-card-phone"):
        assert (stack.artifacts / f"{name}.png").exists(), name


def test_the_risk_and_what_changed_cards_are_cited_and_fit_a_phone(stack: Stack):
    new_thread(stack)
    for command, header, name in (
        # In the rep's own words: the agent's insight tools answer, and their views are the cards.
        ("which of my deals are at risk?", "Deals at risk", "risk-card"),
        ("what changed on my deals since Friday?", "What changed", "catch-up-card"),
    ):
        stack.teams("say", text=command, expect=header)
        shown = stack.teams("card", contains=header, text="Sources")
        stack.teams("screenshot", name=f"{name}-desktop", card=header)
        assert re.search(r"\[(opp|act)-[\w-]+\]", shown["text"]), shown["text"]
        assert detect_email(shown["text"]) == [], shown["text"]
        assert detect_phone_numbers(shown["text"]) == [], shown["text"]
        fitted = at_phone_size(stack, f"{name}-phone", contains=header)
        assert inside(fitted["card"], PHONE), fitted
        assert fitted["cardOverflow"] <= 1, fitted
        assert shown["buttons"] == [], "read-only cards: nothing to click"
    for name in ("risk-card-desktop", "risk-card-phone", "catch-up-card-desktop", "catch-up-card-phone"):
        assert (stack.artifacts / f"{name}.png").exists(), name


def test_after_a_customer_meeting_the_follow_through_card_is_posted_once_and_fits_a_phone(
    stack: Stack, e2e_database_url: str, alex_always_at_work: None
):
    from bot.followthrough_delivery import FollowThroughReport, deliver_follow_throughs

    new_thread(stack)
    # A lead time no other scenario sets: an earlier "brief on" here would make "brief on" a
    # change to nothing, which is answered, not proposed.
    set_by_saying(stack, "brief 55 minutes before", "Meeting prep briefs are on, 55 minutes before")
    events = stack.sandbox.admin("GET", "/admin/export")["events"]
    meeting = next(e for e in events if e["subject"] == "Acme analytics add-on: order form")
    at = dt.datetime.fromisoformat(meeting["end_at"].replace("Z", "+00:00")) + dt.timedelta(minutes=10)

    def timer() -> FollowThroughReport:
        async def run(runtime: BotRuntime) -> FollowThroughReport:
            return await deliver_follow_throughs(runtime, at=at)

        return with_bot_runtime(stack, e2e_database_url, run)

    assert [m for _, m in timer().posted] == [meeting["id"]]
    assert timer().posted == [], "one card per meeting"
    shown = stack.teams("card", contains="How did it go?", text="Sources")
    stack.teams("screenshot", name="follow-through-card-desktop", card="How did it go?")
    assert "[opp-acme-analytics]" in shown["text"], shown["text"]
    assert {"Log this meeting", "Set the next step", "Add the task", "Not now"} <= set(shown["buttons"])
    assert detect_email(shown["text"]) == [], shown["text"]
    buttons = list(dict.fromkeys(shown["buttons"]))
    fitted = at_phone_size(stack, "follow-through-card-phone", contains="How did it go?", buttons=buttons)
    for button in buttons:
        assert fitted["buttons"][button]["visible"], fitted
        assert inside(fitted["buttons"][button]["box"], PHONE), fitted
    assert fitted["cardOverflow"] <= 1, fitted


# --- a rep's day in their own words (issue 35) ----------------------------------------------------

DICTATION = (
    "just got off the phone with Sarah Chen at Acme - she confirmed budget for the fleet expansion, "
    "wants a proposal by the 15th. log it"
)
NEAR_MISSES = (
    "what is the capital of France?",
    "who won the world cup?",
    "what's my commission on the Acme renewal?",
)


def crm_activity(stack: Stack, tool_call_id: str, account_id: str = "acc-acme") -> dict[str, Any]:
    """The activity one proposal wrote, as the CRM answers Alex (contacts and due date included)."""
    result = stack.sandbox.call("alex", "list_activities", account_id=account_id, limit=100)
    assert result["isError"] is False, result
    found = [
        a for a in result["structuredContent"]["items"] if str(a["external_id"]).endswith(f":{tool_call_id}")
    ]
    assert len(found) == 1, found
    return dict(found[0])


def proposals_in(replies: list[dict[str, Any]]) -> list[str]:
    """The proposal ids of the approval cards among these replies, in the order posted."""
    return [i for r in replies if "Your approval is needed" in r["text"] for i in r["ids"]]


def no_open_stream(stack: Stack) -> None:
    """No "Working on it…" stream is left open above any card: every turn's stream was closed."""
    texts = [m.get("text", "") for m in stack.teams("messages")["messages"]]
    left = [t for t in texts if t.strip().startswith("Working on it")]
    assert left == [], left


def answer_to(stack: Stack, text: str, expect: str) -> str:
    replies = stack.teams("say", text=text, expect=expect)["replies"]
    return next(r["text"] for r in reversed(replies) if expect in r["text"])


def test_a_reps_day_in_their_own_words(stack: Stack):
    new_thread(stack)
    # Capture from dictation: the call and its follow-up task, two cards at once.
    replies = stack.teams("say", text=DICTATION, expect="Your approval is needed")["replies"]
    stack.teams("card", contains="Log an activity", text="task")
    replies = replies + stack.teams("messages")["messages"][-3:]
    ids = list(dict.fromkeys(proposals_in(replies)))
    assert len(ids) == 2, replies
    call_id, task_id = ids
    stack.teams("screenshot", name="day-capture-desktop")
    fitted = at_phone_size(stack, "day-capture-phone", cardId=of(task_id))
    assert inside(fitted["card"], PHONE), fitted
    # Decided in the other order: the task first, then the call.
    stack.teams("click", cardId=of(task_id), button="Approve")
    stack.teams("card", cardId=of(task_id), text="✓ Approved")
    stack.teams("click", cardId=of(call_id), button="Approve")
    stack.teams("card", cardId=of(call_id), text="✓ Approved")
    call = crm_activity(stack, call_id)
    assert call["type"] == "call"
    assert call["opportunity"]["id"] == "opp-acme-expansion"
    assert [c["name"] for c in call["contacts"]] == ["Sarah Chen"]
    task = crm_activity(stack, task_id)
    assert task["type"] == "task"
    assert str(task["due_date"]).endswith("-15"), task

    # A reminder: a task with a due date, regarding the person.
    reminder = propose(stack, "remind me to call Maria Gonzalez tomorrow")
    stack.teams("click", cardId=of(reminder), button="Approve")
    stack.teams("card", cardId=of(reminder), text="✓ Approved")
    assert crm_activity(stack, reminder)["due_date"]

    # A delegation until a weekday, and its revocation by first name.
    granted = propose(stack, "delegate my approvals to Megan until Friday")
    stack.teams("card", cardId=of(granted), text="Megan Bowen")
    stack.teams("click", cardId=of(granted), button="Approve")
    stack.teams("card", cardId=of(granted), text="✓ Approved")
    ended = propose(stack, "revoke my delegation to Megan")
    stack.teams("click", cardId=of(ended), button="Approve")
    stack.teams("card", cardId=of(ended), text="✓ Approved")

    # What waits, asked in the rep's words, while a proposal waits.
    waiting = propose(stack, "log a call with Acme about the renewal terms")
    # The answer is the approvals card (the tool's view), whatever the words.
    listed = answer_to(stack, "anything waiting on my approval?", "waits for your decision")
    assert "Log an activity" in listed
    stack.teams("screenshot", name="day-waiting-desktop")
    stack.teams("click", cardId=of(waiting), button="Reject…")
    stack.teams("card", cardId=of(waiting), text="Why not?")
    stack.teams("fill", cardId=of(waiting), label="Why not?", value="logged it already")
    stack.teams("click", cardId=of(waiting), button="Reject")
    stack.teams("card", cardId=of(waiting), text="✗ Rejected")

    # A brief and a digest, asked in free words.
    new_thread(stack)
    # Each answered with its card: the brief's, and the digest's with its buttons.
    brief = answer_to(stack, "brief me for my next meeting please", "Meeting prep")
    assert "Sources" in brief
    digest = answer_to(stack, "give me today's digest", "Daily digest")
    assert "Your day" in digest
    stack.teams("screenshot", name="day-digest-desktop")

    # An undo by name: the call logged on the fleet expansion is voided, after approval.
    undo = propose(stack, "undo the change I made to the Acme fleet expansion")
    stack.teams("card", cardId=of(undo), text="Undo a change")
    stack.teams("click", cardId=of(undo), button="Approve")
    stack.teams("card", cardId=of(undo), text="✓ Approved")

    # Near misses: an honest "can't … yet", never an answer to a neighbouring question.
    for question in NEAR_MISSES:
        said = answer_to(stack, question, "I c")
        first = said.strip().split("\n", 1)[0]
        assert first.startswith(("I can't", "I couldn't read")), said
        assert "[acc-" not in said, said
    stack.teams("screenshot", name="day-near-miss-desktop")
    at_phone_size(stack, "day-near-miss-phone", contains="I can't")
    no_open_stream(stack)
    for name in ("day-capture-desktop", "day-capture-phone", "day-near-miss-desktop", "day-near-miss-phone"):
        assert (stack.artifacts / f"{name}.png").exists(), name
