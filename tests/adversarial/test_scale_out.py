"""Scale-out on the real queue (invariants 3 and 10, see docs/ARCHITECTURE.md): worker processes, one PostgreSQL, one Azurite queue.

Reps ask in parallel, through the real HTTP trigger (``messages``, run in this process:
it validates the channel-signed JWT and enqueues the envelope), for CRM writes: "log a
call with <account> — …" and "change next step on <opportunity> to …". Worker processes
(``tests/support/queue_worker.py``: the Functions host's queue listener around
``function_app``'s ``turns`` and ``turns_poison``) run the turns. Each approval card
reaches the fake Bot Connector, and the rep submits the card's Approve (its
``Action.Submit`` data plus its inputs, as Teams sends them) through the same HTTP
trigger, so whichever worker polls first resumes the proposal. Meanwhile workers are
SIGKILLed in the middle of turns and restarted; their messages come back when the
visibility lease runs out.

At the end, from the sandbox export, the audit log and the connector's recordings:

* no duplicate writes: each approved proposal made one CRM change (one activity, or one
  opportunity version), and nothing else changed;
* no lost turns: every activity a rep posted was answered in its conversation;
* every rep told the outcome: the approval card was updated in place to ✓ Approved with
  the audit number the audit log holds for that very change;
* any proposal resumable from any worker: approvals completed on workers other than the
  one that proposed them, including after kills;
* every CRM change audited: audit rows and CRM changes match one to one, and the hash
  chain verifies.

CI runs a small count; ``make soak`` (``COPILOT_SOAK=1``) the full one.
``SCALE_SEED`` fixes the random choices of a run (which worker dies, and when, relative to
its turn; the seed is printed), though not the timing of the processes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import secrets
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import IO, Any, TypeVar, cast

import azure.functions as func
import psycopg
import pytest
from aiohttp import web
from azure.storage.queue import QueueClient
from cryptography.fernet import Fernet
from langchain_core.messages import AIMessage, ToolMessage
from psycopg.rows import dict_row

from bench.host_json import QueueOptions
from bot.cards import AUDIT_ELEMENT_PREFIX, card_element_id
from bot.rep_tokens import SsoRepTokens
from copilot.auth.tokens import dev_sign_in
from copilot.settings import Settings
from functions.host import get_host, reset_host
from sandbox.directory import find_user
from tests.adversarial.counts import Tally, count, soak
from tests.support.adaptive_cards import all_text, element_ids, submit_actions, teams_submit
from tests.support.azurite import Azurite, run_azurite
from tests.support.channel_tokens import ChannelTokens
from tests.support.fake_connector import FakeConnector, Recorded, card_of
from tests.support.postgres import fresh_database
from tests.support.queue_worker import PROJECT_ROOT, WorkerPool
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

WORKERS = 4
REPS = ("alex", "megan", "diego", "lidia")
TURNS = count(8, 200)
KILLS = count(2, 40)
LEASE_SECONDS = 3
"""Receive visibility of the workers: a killed worker's message is redelivered after this."""
RETRY_DELAY_SECONDS = 1
"""host.json's visibilityTimeout (10 s) shortened: the delay before a failed message is retried."""
CRM_LATENCY_MS = 50
"""Every CRM call takes this long, so a kill at a random moment lands inside a turn."""
STEP_SECONDS = 45.0
"""How long a rep waits for a card or an outcome: redelivery after kills included."""
PRESSES = 3
"""A rep whose card was not updated presses Approve again, at most this many times in all."""

TURN_FAILED = "something went wrong on my side"
POISON_NOTICE = "something went wrong with your last request"
POISON_REF = re.compile(r"something went wrong with your last request \(ref ([0-9a-f]+)\)")

EVIDENCE_DIR = PROJECT_ROOT / "test-artifacts" / "adversarial"

T = TypeVar("T")


# --- a Bot Connector that can refuse the replies to one activity ---------------------------------------


@dataclass
class RefusingConnector(FakeConnector):
    """The fake Bot Connector, refusing (403) every reply to the activities in ``refuse``.

    403 is what Teams answers a bot that may not post there; msrest does not retry it,
    so a refused turn fails at once, and its error reply fails too: exactly the failure
    the Functions host retries. A proactive message (the poison notice) is not a reply
    to that activity and goes through.
    """

    refuse: set[str] = field(default_factory=set)
    refused: list[Recorded] = field(default_factory=list)

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()  # aiohttp keeps the body: the parent reads it again
        if body.get("replyToId") in self.refuse:
            self.refused.append(Recorded("POST", request.match_info["conversation"], None, body, None))
            return web.json_response(
                {"error": {"code": "BotNotInConversationRoster", "message": "refused by the test"}},
                status=403,
            )
        return await super()._send(request)


# --- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as running:
        yield running


@pytest.fixture(scope="module")
def drained_sandbox(sandbox: SandboxProcess) -> SandboxProcess:
    """The session's sandbox, with its output read as it comes.

    ``tests/support/sandbox_process.py`` starts the sandbox with ``stdout=PIPE`` and never
    reads it: once about 64 KiB of request log pile up, the sandbox blocks on its next
    write and stops answering (the soak hit this after ~140 s: every turn then timed out).
    """
    process = sandbox.process
    if process.stdout is not None and not getattr(process, "scale_out_drained", False):
        process.scale_out_drained = True  # type: ignore[attr-defined]  # once per session
        threading.Thread(target=_drain, args=(process.stdout,), name="sandbox-output", daemon=True).start()
    return sandbox


def _drain(stream: IO[str]) -> None:
    for _ in iter(stream.readline, ""):
        pass


@dataclass
class Deployment:
    """One Function App: its settings and database, the turn queue, the connector, the workers."""

    settings: Settings
    database_url: str
    env: dict[str, str]
    connector: RefusingConnector
    pool: WorkerPool


@pytest.fixture(scope="module")
async def deployment(
    postgres_server_url: str,
    drained_sandbox: SandboxProcess,
    azurite: Azurite,
    channel: ChannelTokens,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Deployment]:
    """The Function App in deployed mode (app id + secret, SSO) on a fresh database, with its
    queue workers running; shared by this module's tests (the workers take seconds to start).
    Every worker process is gone afterwards."""
    from copilot.middleware.resilience import reset_breakers
    from tests.support.copilot_env import copilot_settings, prepare_database

    reset_breakers()
    sandbox = drained_sandbox
    directory = tmp_path_factory.mktemp("scale-out")
    with fresh_database(postgres_server_url) as database_url, pytest.MonkeyPatch.context() as patch:
        settings = copilot_settings(database_url, sandbox)
        await prepare_database(settings)
        env = {
            "DATABASE_URL": database_url,
            # One data directory and one audit key for every process, as one Function App has.
            "COPILOT_DATA_DIR": str(directory / "data"),
            "COPILOT_AUDIT_HMAC_KEYS": f"scale:{base64.b64encode(secrets.token_bytes(32)).decode()}",
            "CRM_MCP_URL": settings.crm_mcp_url,
            "GRAPH_BASE_URL": settings.graph_base_url,
            "ENTRA_AUTHORITY": settings.entra_authority,
            "ENTRA_CA_BUNDLE": str(settings.entra_ca_bundle),
            "COPILOT_TOOL_RETRY_INITIAL_DELAY": str(settings.tool_retry_initial_delay),
            "COPILOT_TOOL_RETRY_MAX_DELAY": str(settings.tool_retry_max_delay),
            "COPILOT_BREAKER_RESET_SECONDS": str(settings.breaker_reset_seconds),
            "MicrosoftAppId": sandbox.settings.bot_app_id,
            "MicrosoftAppPassword": sandbox.settings.bot_client_secret,
            "BOT_CONNECTOR_AUTHORITY": sandbox.settings.idp_base_url,
            "BOT_CONNECTOR_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
            "COPILOT_TOKEN_ENCRYPTION_KEY": Fernet.generate_key().decode(),
            "TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL": channel.metadata_url,
            "AzureWebJobsStorage": azurite.connection_string,
            "COPILOT_TURN_QUEUE": f"scale-{uuid.uuid4().hex[:12]}",
        }
        for name, value in env.items():
            patch.setenv(name, value)
        await reset_host()
        connector = RefusingConnector()
        await connector.start()
        pool = WorkerPool(
            WORKERS,
            dict(os.environ),
            directory / "workers",
            lease=LEASE_SECONDS,
            retry_delay=RETRY_DELAY_SECONDS,
        )
        try:
            pool.start()
            yield Deployment(settings, database_url, dict(os.environ), connector, pool)
        finally:
            pool.stop()
            await connector.stop()
            await reset_host()
            sandbox.admin("PUT", "/admin/knobs", {})


# --- Teams, through the HTTP trigger -------------------------------------------------------------------------


@dataclass(frozen=True)
class Rep:
    handle: str
    crm_id: str
    aad: str
    tenant: str
    name: str
    conversation: str
    accounts: tuple[dict[str, Any], ...]
    opportunities: tuple[dict[str, Any], ...]


def rep(handle: str, export: dict[str, list[dict[str, Any]]]) -> Rep:
    user = find_user(handle)
    assert user is not None, handle
    return Rep(
        handle=handle,
        crm_id=user.id,
        aad=user.aad_object_id,
        tenant=user.tenant_id,
        name=user.name,
        conversation=f"a:scale-{handle}-{uuid.uuid4().hex[:8]}",
        accounts=tuple(a for a in export["accounts"] if a["owner_id"] == user.id),
        opportunities=tuple(
            o
            for o in export["opportunities"]
            if o["owner_id"] == user.id and not str(o["stage"]).startswith("Closed")
        ),
    )


def http_trigger() -> Callable[[func.HttpRequest], Awaitable[func.HttpResponse]]:
    """The registered ``messages`` function, as the Functions host would call it."""
    import function_app

    function_app.app.functions_bindings = None  # get_functions() lists each function once
    functions = {str(f.get_function_name()): f for f in function_app.app.get_functions()}
    return cast(
        Callable[[func.HttpRequest], Awaitable[func.HttpResponse]],
        functions["messages"].get_user_function(),
    )


class Teams:
    """Channel-signed Teams activities into the HTTP trigger; the connector's recordings out."""

    def __init__(self, connector: RefusingConnector, channel: ChannelTokens):
        self.connector = connector
        self.channel = channel
        self.trigger = http_trigger()
        self.posted: dict[str, Rep] = {}

    def activity(self, sender: Rep, **fields: Any) -> dict[str, Any]:
        return {
            "type": "message",
            "id": uuid.uuid4().hex,
            "timestamp": "2026-01-05T10:00:00.000Z",
            "channelId": "msteams",
            "serviceUrl": self.connector.url,
            "from": {"id": f"29:{sender.aad}", "name": sender.name, "aadObjectId": sender.aad},
            "conversation": {
                "id": sender.conversation,
                "conversationType": "personal",
                "tenantId": sender.tenant,
            },
            "recipient": {"id": "28:bot", "name": "CRM Copilot"},
            "channelData": {"tenant": {"id": sender.tenant}},
            "locale": "en-US",
            **fields,
        }

    async def post(self, sender: Rep, activity: dict[str, Any]) -> int:
        self.posted[activity["id"]] = sender
        request = func.HttpRequest(
            method="POST",
            url="/api/messages",
            headers={
                "Content-Type": "application/json",
                "Authorization": self.channel.header(activity["serviceUrl"]),
            },
            body=json.dumps(activity).encode(),
        )
        response = await self.trigger(request)
        return response.status_code

    def messages(self, conversation: str) -> list[Recorded]:
        return [m for m in self.connector.messages() if m.conversation_id == conversation]

    def replies_to(self, activity_id: str) -> list[Recorded]:
        return [m for m in self.connector.messages() if m.body.get("replyToId") == activity_id]


def text_of(recorded: Recorded) -> str:
    """What the rep reads in one message: its text and the text of its cards."""
    parts = [str(recorded.body.get("text") or "")]
    for attachment in recorded.body.get("attachments") or []:
        if attachment.get("contentType") == "application/vnd.microsoft.card.adaptive":
            parts.append(all_text(attachment["content"]))
    return "\n".join(p for p in parts if p)


def ids_of(recorded: Recorded) -> list[str]:
    """The element ids of one message's cards (a card's proposal and audit record are there)."""
    return [
        i
        for a in recorded.body.get("attachments") or []
        if a.get("contentType") == "application/vnd.microsoft.card.adaptive"
        for i in element_ids(a["content"])
    ]


def audit_number(recorded: Recorded) -> int | None:
    """The audit record an approved card names in its data."""
    found = [
        i.removeprefix(AUDIT_ELEMENT_PREFIX) for i in ids_of(recorded) if i.startswith(AUDIT_ELEMENT_PREFIX)
    ]
    return int(found[0]) if found and found[0].isdigit() else None


def approve_button(recorded: Recorded) -> dict[str, Any] | None:
    """The Approve button's data if this message is an approval card."""
    try:
        card = card_of(recorded)
    except AssertionError:
        return None
    for action in submit_actions(card):
        data = action.get("data") or {}
        if data.get("copilot") == "decision" and data.get("action") == "approve":
            return dict(data)
    return None


async def until(condition: Callable[[], T], within: float, interval: float = 0.05) -> T:
    """Poll ``condition`` until it is truthy or ``within`` seconds pass; its last value."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        await asyncio.sleep(interval)


async def sign_in_with_sso(settings: Settings, handles: tuple[str, ...]) -> None:
    """What each rep's Teams SSO token exchange leaves behind: their token, stored encrypted."""
    host = await get_host()
    reps = host.runtime.reps
    assert isinstance(reps, SsoRepTokens), "the app must run in SSO mode (app id set)"
    for handle in handles:
        await reps.save(await dev_sign_in(settings, handle))


# --- one rep's turns -----------------------------------------------------------------------------------------


@dataclass
class Turn:
    """One request of one rep: the question, its card, the Approve presses, the outcome."""

    rep: Rep
    number: int
    tool: str
    target: str
    token: str
    text: str
    question_id: str = ""
    card: Recorded | None = None
    thread_id: str = ""
    tool_call_id: str = ""
    presses: list[str] = field(default_factory=list)
    outcome: str | None = None
    audit_id: int | None = None
    problems: list[str] = field(default_factory=list)
    finished: bool = False

    @property
    def key(self) -> str:
        return f"{self.thread_id}:{self.tool_call_id}"

    def describe(self) -> str:
        return f"{self.rep.handle} turn {self.number} ({self.tool} {self.target}, {self.token})"


def plan_turns(reps: list[Rep], total: int, run: str) -> list[Turn]:
    turns = []
    for number in range(total):
        sender = reps[number % len(reps)]
        own = number // len(reps)
        token = f"{run}t{number:03d}"
        if number % 2 == 0:
            account = sender.accounts[own % len(sender.accounts)]
            tool, target = "log_activity", str(account["id"])
            text = f"log a call with {account['name']} — scale check {token}"
        else:
            opportunity = sender.opportunities[own % len(sender.opportunities)]
            tool, target = "update_opportunity", str(opportunity["id"])
            # By id: several deal names are ambiguous to the offline model; a rep can paste the id.
            text = f"change next step on {target} to scale check {token}"
        turns.append(Turn(sender, number, tool, target, token, text))
    return turns


def press_settled(teams: Teams, turn: Turn, press_id: str) -> bool:
    """The card shows an outcome, or the press got an answer of some other kind."""
    return outcome_card(teams, turn) is not None or bool(teams.replies_to(press_id))


def outcome_card(teams: Teams, turn: Turn) -> Recorded | None:
    """The in-place update of the turn's approval card, once it was decided."""
    marker = card_element_id(turn.tool_call_id)
    for update in teams.connector.updates():
        if update.conversation_id == turn.rep.conversation and marker in ids_of(update):
            return update
    return None


async def run_turn(teams: Teams, turn: Turn) -> None:
    """Ask, wait for the card, press Approve (again if the card stays as it was)."""
    question = teams.activity(turn.rep, text=turn.text)
    turn.question_id = question["id"]

    def notices() -> int:
        return sum(POISON_NOTICE in text_of(m) for m in teams.messages(turn.rep.conversation))

    notices_before = notices()
    status = await teams.post(turn.rep, question)
    if status != 202:
        turn.problems.append(f"the HTTP trigger answered {status} to the question")
        return

    def cards() -> list[Recorded]:
        return [m for m in teams.replies_to(turn.question_id) if approve_button(m) is not None]

    def settled() -> bool:
        return (
            bool(cards())
            or any(TURN_FAILED in text_of(m) for m in teams.replies_to(turn.question_id))
            or notices() > notices_before
        )

    await until(settled, STEP_SECONDS)
    found = cards()
    if not found:
        told = [text_of(m)[:120] for m in teams.replies_to(turn.question_id)]
        turn.problems.append(f"question {turn.question_id} got no approval card; the rep was told {told}")
        return
    card = found[0]
    button = approve_button(card)
    assert button is not None
    if button.get("tool") != turn.tool or turn.token not in text_of(card).lower():
        turn.problems.append(f"the card proposes something else: {text_of(card)[:200]!r}")
        return
    turn.card = card
    turn.thread_id, turn.tool_call_id = str(button["thread_id"]), str(button["tool_call_id"])
    data = teams_submit(card_of(card), "approve")
    for press in range(1, PRESSES + 1):
        submit = teams.activity(turn.rep, value=data, replyToId=card.activity_id)
        turn.presses.append(submit["id"])
        status = await teams.post(turn.rep, submit)
        if status != 202:
            turn.problems.append(f"the HTTP trigger answered {status} to Approve press {press}")
            continue
        await until(partial(press_settled, teams, turn, str(submit["id"])), STEP_SECONDS)
        update = outcome_card(teams, turn)
        if update is not None:
            text = text_of(update)
            turn.outcome = "approved" if "✓ Approved" in text else text.split("\n", 1)[0]
            turn.audit_id = audit_number(update)
            return
        told = [text_of(m)[:100] for m in teams.replies_to(submit["id"])]
        turn.problems.append(
            f"Approve press {press} ({submit['id']}): card not updated; the rep was told {told}"
        )


async def rep_session(teams: Teams, turns: list[Turn]) -> None:
    """A rep works through their requests one after the other, as a person would."""
    for turn in turns:
        try:
            await run_turn(teams, turn)
        finally:
            turn.finished = True


# --- chaos -----------------------------------------------------------------------------------------------------


def typical_seconds(pool: WorkerPool, kind: str) -> float:
    """The median duration of the finished deliveries of this kind (2 s before there are any)."""
    events = pool.events()
    starts = {e["delivery"]: e["t"] for e in events if e["event"] == "start" and e.get("kind") == kind}
    durations = sorted(
        e["t"] - starts[e["delivery"]] for e in events if e["event"] == "done" and e["delivery"] in starts
    )
    return durations[len(durations) // 2] if durations else 2.0


@dataclass
class Kill:
    slot: str
    pid: int
    delivery: dict[str, Any]
    after_seconds: float


def busy_delivery(
    pool: WorkerPool, rng: random.Random, kind: str | None, *, warm: bool
) -> tuple[str, dict[str, Any]] | None:
    """A random (slot, delivery) of a turn running right now, of ``kind`` if given.

    ``warm``: only on workers that already finished a turn. A fresh worker spends its first
    seconds opening the host, where a kill only shows that a cold start can be lost.
    """
    finished = {e["pid"] for e in pool.events() if e["event"] == "done"}
    choices = [
        (slot, delivery)
        for slot, running in pool.in_flight().items()
        for delivery in running
        if delivery.get("function") == "turns"
        and (kind is None or delivery.get("kind") == kind)
        and (not warm or delivery["pid"] in finished)
    ]
    return rng.choice(choices) if choices else None


async def chaos(
    pool: WorkerPool, kills: int, turns: list[Turn], rng: random.Random, started: float
) -> list[Kill]:
    """SIGKILL a busy worker at a random moment of its turn, ``kills`` times, spread over the
    run; alternately one running a question and one running a decision. Each slot is
    restarted at once, as the platform would start a new instance."""
    done: list[Kill] = []

    def over() -> bool:
        return all(t.finished for t in turns)

    def progressed(due: int) -> bool:
        return sum(t.finished for t in turns) >= due or over()

    for index in range(kills):
        await until(partial(progressed, index * len(turns) // (kills + 1)), 3600)
        wanted = ("message", "decision")[index % 2]
        while not over():
            target = (
                await until(partial(busy_delivery, pool, rng, wanted, warm=True), 10.0)
                or await until(partial(busy_delivery, pool, rng, wanted, warm=False), 3.0)
                or await until(partial(busy_delivery, pool, rng, None, warm=False), 3.0)
            )
            if target is None:
                continue
            slot, delivery = target
            # A random moment of the turn (proposal, claim, CRM write, audit, card update...):
            # uniform over what is probably left of it, judged by the deliveries so far.
            left = typical_seconds(pool, str(delivery.get("kind"))) - (time.time() - float(delivery["t"]))
            await asyncio.sleep(rng.uniform(0.0, max(left, 0.1)))
            if delivery not in pool.in_flight().get(slot, []):
                continue  # it finished meanwhile; find another one
            killed = pool.kill(slot)
            pool.restart(slot)
            done.append(Kill(slot, killed.pid, delivery, round(time.monotonic() - started, 2)))
            break
    return done


# --- the accounting ------------------------------------------------------------------------------------------------


def poison_refs(pool: WorkerPool) -> dict[str, str]:
    """Poison notice ref → the activity whose message was poisoned (the ref is the poison
    message id's first 8 hex digits, see functions/turns.py)."""
    return {
        str(e["poison_message_id"]).replace("-", "")[:8]: str(e.get("activity_id"))
        for e in pool.events()
        if e["event"] == "poisoned"
    }


def answered(teams: Teams, pool: WorkerPool) -> set[str]:
    """Posted activities with an answer: a reply to them (a message, or the in-place update
    of a card, which is how a decision is answered), or the poison notice for them."""
    refs = poison_refs(pool)
    done = {str(m.body.get("replyToId")) for m in [*teams.connector.messages(), *teams.connector.updates()]}
    for message in teams.connector.messages():
        match = POISON_REF.search(text_of(message))
        if match and match.group(1) in refs:
            done.add(refs[match.group(1)])
    return done


def queues_idle(env: dict[str, str], pool: WorkerPool) -> bool:
    """Nothing left on the turn queue or its poison queue, and no worker busy."""
    from azure.core.exceptions import ResourceNotFoundError

    queue = env["COPILOT_TURN_QUEUE"]
    for name in (queue, f"{queue}-poison"):
        client = QueueClient.from_connection_string(env["AzureWebJobsStorage"], name)
        try:
            if client.get_queue_properties().approximate_message_count:
                return False
        except ResourceNotFoundError:
            pass
        finally:
            client.close()
    return not any(pool.in_flight().values())


async def wait_idle(env: dict[str, str], pool: WorkerPool, within: float) -> bool:
    return await until(partial(queues_idle, env, pool), within, interval=0.2)


async def audit_rows(database_url: str) -> list[dict[str, Any]]:
    async with await psycopg.AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
        cur = await conn.execute("SELECT * FROM audit_log ORDER BY id")
        return [dict(r) for r in await cur.fetchall()]


async def audit_verify(env: dict[str, str]) -> tuple[int, str]:
    """``python -m copilot audit verify --json``, as an admin would run it after the incident."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "copilot", "audit", "verify", "--json",
        cwd=PROJECT_ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await process.communicate()
    return int(process.returncode or 0), output.decode(errors="replace")


async def stuck_evidence(database_url: str, turn: Turn) -> str:
    """Why a proposal was never decided: its approval-card claim and idempotency key."""
    async with await psycopg.AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
        cur = await conn.execute(
            "SELECT activity_id, decided_at FROM approval_cards WHERE thread_id = %s AND tool_call_id = %s",
            (turn.thread_id, turn.tool_call_id),
        )
        cards = await cur.fetchall()
        cur = await conn.execute("SELECT status FROM idempotency_keys WHERE key = %s", (turn.key,))
        keys = await cur.fetchall()
    host = await get_host()
    signed_in = await host.runtime.reps.rep_for(turn.rep.tenant, turn.rep.aad)
    pending: list[str] = []
    if signed_in is not None:
        waiting = await host.runtime.service.pending(signed_in.identity, turn.thread_id)
        pending = [p.tool_call_id for p in waiting.proposals]
    return (
        f"approval_cards={[(c['activity_id'], str(c['decided_at'])) for c in cards]} "
        f"idempotency_keys={[k['status'] for k in keys]} still pending={turn.tool_call_id in pending}"
    )


async def thread_history(sender: Rep) -> list[str]:
    """The rep's thread as its newest checkpoint holds it (message kinds and first words)."""
    host = await get_host()
    service = host.runtime.service
    async with service.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id FROM conversations WHERE conversation_id = %s", (sender.conversation,)
        )
        row = await cur.fetchone()
    if row is None:
        return ["(no thread for the conversation)"]
    saved = await service.saver.aget_tuple(
        {"configurable": {"thread_id": row["thread_id"], "checkpoint_ns": ""}}
    )
    if saved is None:
        return [f"(thread {row['thread_id']} has no checkpoint)"]
    metadata = saved.metadata or {}
    lines = [
        f"thread {row['thread_id']}: step {metadata.get('step')} ({metadata.get('source')}), "
        f"{len(saved.pending_writes or [])} pending writes"
    ]
    for message in saved.checkpoint.get("channel_values", {}).get("messages", []):
        calls = [f"{c['name']}({c['id'][-8:]})" for c in getattr(message, "tool_calls", None) or []]
        text = str(message.content)[:90].replace("\n", " ")
        lines.append(f"  {type(message).__name__}: {text} {' '.join(calls)}".rstrip())
    return lines


def transcript(teams: Teams, turn: Turn) -> list[str]:
    """What the connector sent about this turn: replies to its activities, its card's updates."""
    names = {turn.question_id: "question"} | {p: f"press {i + 1}" for i, p in enumerate(turn.presses)}
    lines = []
    for call in teams.connector.calls:
        if call.conversation_id != turn.rep.conversation or call.body.get("type") != "message":
            continue
        to = str(call.body.get("replyToId") or "")
        text = text_of(call)
        if (
            to not in names
            and not (turn.tool_call_id and card_element_id(turn.tool_call_id) in ids_of(call))
            and turn.token not in text.lower()
        ):
            continue
        first = text.split("\n", 1)[0][:90]
        lines.append(f"  {call.method} {call.activity_id} re {names.get(to, to[:8] or '-')}: {first}")
    return lines


def deliveries_of(pool: WorkerPool, activity_id: str) -> list[dict[str, Any]]:
    return [e for e in pool.events() if e.get("activity_id") == activity_id]


def delivery_story(pool: WorkerPool, kills: list[Kill], turn: Turn) -> str:
    """Who ran each of the turn's messages, and which of those runs a kill cut short (the
    delivery a kill aimed at, or another one its worker was running at the same time)."""
    aimed = {k.delivery["delivery"]: k for k in kills}
    by_pid = {k.pid: k for k in kills}
    finished = {
        e["delivery"] for e in pool.events() if e["event"] in ("done", "failed", "poisoned", "lease_lost")
    }
    parts = []
    for label, activity_id in [("question", turn.question_id), *(("press", p) for p in turn.presses)]:
        runs = []
        for e in deliveries_of(pool, activity_id):
            if e["event"] == "start":
                kill = aimed.get(e["delivery"]) or (
                    by_pid.get(e["pid"]) if e["delivery"] not in finished else None
                )
                cut = f" KILLED at {kill.after_seconds}s" if kill else ""
                runs.append(f"{e['worker']}[{e['pid']}] try {e['dequeue_count']}{cut}")
            elif e["event"] != "done":
                runs.append(f"{e['event']} try {e['dequeue_count']}")
        parts.append(f"{label} {activity_id[:8]}: {', '.join(runs) or 'never delivered'}")
    return "deliveries: " + "; ".join(parts)


async def loose_ends(sender: Rep) -> tuple[str, list[str], list[str]]:
    """The rep's thread at the end: tool calls never answered nor pending (a proposal no
    worker can resume, and a history real chat models refuse), and proposals still pending
    (every request was approved, so each one is a change nobody asked for twice)."""
    host = await get_host()
    service = host.runtime.service
    async with service.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id FROM conversations WHERE conversation_id = %s", (sender.conversation,)
        )
        row = await cur.fetchone()
    signed_in = await host.runtime.reps.rep_for(sender.tenant, sender.aad)
    if row is None or signed_in is None:
        return "(none)", [], []
    thread_id = str(row["thread_id"])
    saved = await service.saver.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    messages = saved.checkpoint.get("channel_values", {}).get("messages", []) if saved else []
    results = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    pending = [p.tool_call_id for p in (await service.pending(signed_in.identity, thread_id)).proposals]
    dangling = [
        f"{call['name']}({call['id']})"
        for m in messages
        if isinstance(m, AIMessage)
        for call in m.tool_calls
        if call["id"] not in results and call["id"] not in pending
    ]
    return thread_id, dangling, pending


# --- the scale-out proof ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(3600 if soak() else 300)
async def test_workers_killed_mid_turn_lose_no_turn_write_each_approval_once_and_audit_every_change(
    deployment: Deployment, channel: ChannelTokens, sandbox: SandboxProcess
):
    seed = int(os.environ.get("SCALE_SEED") or random.SystemRandom().randrange(1 << 30))
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:6]
    print(f"\nscale-out: seed {seed}, run {run}, {WORKERS} workers, {TURNS} turns, {KILLS} kills")
    pool, connector, database_url = deployment.pool, deployment.connector, deployment.database_url
    before = sandbox.admin("GET", "/admin/export")
    reps = [rep(handle, before) for handle in REPS]
    await sign_in_with_sso(deployment.settings, REPS)
    teams = Teams(connector, channel)
    assert await until(lambda: len(pool.ready_pids()) >= WORKERS, 90.0), list(pool.log_tail())

    turns = plan_turns(reps, TURNS, run)
    started = time.monotonic()
    sandbox.admin("PUT", "/admin/knobs", {"latency_ms": CRM_LATENCY_MS})
    try:
        sessions = [rep_session(teams, [t for t in turns if t.rep is r]) for r in reps]
        killing = asyncio.create_task(chaos(pool, KILLS, turns, rng, started))
        try:
            await asyncio.gather(*sessions)
        except BaseException:
            killing.cancel()
            raise
        kills = await killing
        idle = await wait_idle(deployment.env, pool, STEP_SECONDS)
        posted = set(teams.posted)
        await until(lambda: posted <= answered(teams, pool), 15.0, interval=0.5)
    finally:
        sandbox.admin("PUT", "/admin/knobs", {})
    elapsed = time.monotonic() - started

    after = sandbox.admin("GET", "/admin/export")
    rows = await audit_rows(database_url)
    verify_code, verify_output = await audit_verify(deployment.env)
    # This test's messages only (the module's other test shares the workers).
    events = [e for e in pool.events() if e.get("activity_id") in posted or e["event"] == "lease_lost"]
    tally = Tally("scale-out")

    # --- what changed in the CRM during the run --------------------------------------------------------
    old_activities = {a["id"] for a in before["activities"]}
    new_activities = [a for a in after["activities"] if a["id"] not in old_activities]
    old_requests = {(r["tenant_id"], r["idempotency_key"]) for r in before["applied_requests"]}
    new_requests = [
        r for r in after["applied_requests"] if (r["tenant_id"], r["idempotency_key"]) not in old_requests
    ]
    versions_before = {o["id"]: int(o["version"]) for o in before["opportunities"]}
    crm_keys = Counter(
        [str(a["external_id"]) for a in new_activities] + [str(r["idempotency_key"]) for r in new_requests]
    )
    audit_keys = Counter(f"{r['thread_id']}:{r['tool_call_id']}" for r in rows)
    audit_by_id = {int(r["id"]): r for r in rows}

    # --- every turn: one card, one write, the rep told, the change audited ----------------------------
    done_answering = answered(teams, pool)
    evidence: list[str] = []

    def check(passed: bool, what: str) -> None:
        tally.record(passed, what)
        if not passed:
            evidence.extend([f"== {what}", ""])

    for turn in turns:
        problems = list(turn.problems)
        if turn.card is not None and turn.outcome != "approved":
            problems.append(f"outcome {turn.outcome!r}; {await stuck_evidence(database_url, turn)}")
        token = turn.token.lower()
        if turn.tool == "log_activity":
            changes = [a for a in new_activities if token in str(a["notes"]).lower()]
            keys = [str(a["external_id"]) for a in changes]
        else:
            changes = [
                r
                for r in new_requests
                if token in str(r["result_json"]["opportunity"].get("next_step", "")).lower()
            ]
            keys = [str(r["idempotency_key"]) for r in changes]
        # The rep approved every card they got: each one is exactly one CRM change.
        expected = 1 if turn.card is not None else 0
        if len(changes) != expected:
            problems.append(f"{len(changes)} CRM changes for one approved proposal (keys {keys})")
        if turn.card is not None and any(k != turn.key for k in keys):
            problems.append(f"CRM change under another proposal's key: {keys} (approved {turn.key})")
        if turn.outcome == "approved":
            row = audit_by_id.get(turn.audit_id or -1)
            if row is None:
                problems.append(
                    f"the card names audit record #{turn.audit_id} in its data, which does not exist"
                )
            elif (row["thread_id"], row["tool_call_id"], row["tool"]) != (
                turn.thread_id,
                turn.tool_call_id,
                turn.tool,
            ):
                problems.append(
                    f"audit record #{turn.audit_id} is about another write: {row['tool_call_id']}"
                )
        for key in keys:
            if audit_keys[key] != 1:
                problems.append(f"CRM change {key} has {audit_keys[key]} audit rows")
        # One request, one proposal: a redelivered question must not propose the change again
        # (a rep approving every card they are shown would write it twice).
        proposed = {
            str(button["tool_call_id"])
            for m in teams.replies_to(turn.question_id)
            if (button := approve_button(m)) is not None
        }
        if len(proposed) > 1:
            problems.append(f"the request was proposed {len(proposed)} times: {sorted(proposed)}")
        for activity_id in [turn.question_id, *turn.presses]:
            if activity_id and activity_id not in done_answering:
                problems.append(
                    f"activity {activity_id} was never answered (deliveries: "
                    f"{[(e['event'], e['pid'], e['dequeue_count']) for e in deliveries_of(pool, activity_id)]})"
                )
        if problems:
            problems.append(delivery_story(pool, kills, turn))
            evidence += [f"== {turn.describe()}", *problems, "conversation:", *transcript(teams, turn)]
            evidence += ["the thread at the end of the run:", *await thread_history(turn.rep), ""]
        tally.record(not problems, f"{turn.describe()}: {'; '.join(problems)}")

    # --- every thread resumable: no dangling tool calls, nothing left pending ------------------------------
    for sender in reps:
        thread_id, dangling, pending = await loose_ends(sender)
        check(
            not dangling and not pending,
            f"{sender.handle}'s thread {thread_id}: tool calls never answered {dangling}, still pending {pending}",
        )
        if dangling or pending:
            evidence.extend(["the thread at the end of the run:", *await thread_history(sender), ""])

    # --- nothing changed that nobody approved; versions; audit one to one --------------------------------
    approved_keys = {t.key for t in turns if t.card is not None}
    unapproved = sorted(k for k in crm_keys if k not in approved_keys)
    check(not unapproved, f"CRM changes nobody approved: {unapproved}")
    duplicates = sorted(k for k, n in crm_keys.items() if n > 1)
    check(not duplicates, f"CRM changes written twice under one key: {duplicates}")
    updates_per_opportunity = Counter(str(r["result_json"]["opportunity"]["id"]) for r in new_requests)
    version_gaps = {
        o["id"]: (int(o["version"]) - versions_before.get(o["id"], 0), updates_per_opportunity[o["id"]])
        for o in after["opportunities"]
        if int(o["version"]) - versions_before.get(o["id"], 0) != updates_per_opportunity[o["id"]]
    }
    check(not version_gaps, f"opportunity versions vs applied updates (delta, updates): {version_gaps}")
    unmatched_audit = sorted(k for k in audit_keys if k not in crm_keys)
    unaudited = sorted(k for k in crm_keys if k not in audit_keys)
    check(not unaudited, f"CRM changes without an audit row: {unaudited}")
    check(not unmatched_audit, f"audit rows without a CRM change: {unmatched_audit}")
    check(verify_code == 0, f"audit verify exited {verify_code}: {verify_output[-400:]}")

    # --- the queue really was exercised: kills mid-turn, redelivery, other workers resuming ---------
    # At CI's few turns on a loaded machine a kill can miss every turn; that is not a
    # product failure, so CI only reports it (the poison test below always exercises
    # redelivery), and the soak, with many turns, requires it.
    def exercised(passed: bool, what: str) -> None:
        if soak():
            check(passed, what)
        elif not passed:
            print(f"scale-out (not asserted at CI counts): {what}")

    exercised(len(kills) == KILLS, f"{len(kills)} of {KILLS} kills landed mid-turn")
    redelivered = [e for e in events if e["event"] == "start" and int(e["dequeue_count"]) > 1]
    exercised(bool(redelivered) or not KILLS, "no message was redelivered after a kill")
    by_delivery_pid: dict[str, set[int]] = {}
    for e in events:
        if e["event"] == "done" and e.get("activity_id"):
            by_delivery_pid.setdefault(str(e["activity_id"]), set()).add(int(e["pid"]))
    cross = 0
    for turn in turns:
        proposers = {int(e["pid"]) for e in deliveries_of(pool, turn.question_id) if e["event"] == "start"}
        deciders = (
            set().union(*(by_delivery_pid.get(p, set()) for p in turn.presses)) if turn.presses else set()
        )
        cross += bool(deciders - proposers)
    exercised(cross > 0, "no approval was resumed on a worker other than the one that proposed it")
    poisoned = [e for e in events if e["event"] == "poisoned"]
    check(
        not poisoned, f"turns moved to the poison queue: {[(e['kind'], e['activity_id']) for e in poisoned]}"
    )
    check(idle, "the queues did not drain")

    print(
        f"scale-out: {len(turns)} turns in {elapsed:.1f}s; kills {[(k.slot, k.pid, k.delivery.get('kind'), k.after_seconds) for k in kills]}; "
        f"redelivered {len(redelivered)}; resumed on another worker {cross}; "
        f"leases lost by a stalled worker {sum(e['event'] == 'lease_lost' for e in events)}; "
        f"CRM changes {sum(crm_keys.values())}; audit rows {len(rows)}; "
        f"approval cards posted {sum(1 for m in teams.connector.messages() if m.body.get('replyToId') in posted and approve_button(m))}"
    )
    if evidence:
        # One file per run: several suites (and people) run at once and share the directory.
        path = EVIDENCE_DIR / f"scale-out-failures-{run}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"seed {seed}, run {run}\n" + "\n".join(evidence) + "\n", encoding="utf-8")
        print(f"scale-out: evidence of the failures in {path}")
    tally.assert_clean()


# --- the poison path ---------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
async def test_a_turn_failing_on_every_delivery_moves_to_the_poison_queue_and_the_rep_is_told(
    deployment: Deployment, channel: ChannelTokens, sandbox: SandboxProcess
):
    max_dequeue = QueueOptions.from_host_json().max_dequeue_count
    pool, connector = deployment.pool, deployment.connector
    before = sandbox.admin("GET", "/admin/export")
    alex = rep("alex", before)
    await sign_in_with_sso(deployment.settings, ("alex",))
    teams = Teams(connector, channel)
    assert await until(lambda: len(pool.ready_pids()) >= 1, 90.0), list(pool.log_tail())

    question = teams.activity(alex, text=f"summarise {alex.accounts[0]['name']}")
    # Every reply to this activity is refused: the turn and its own error reply fail on each delivery.
    connector.refuse.add(question["id"])
    assert await teams.post(alex, question) == 202

    def noticed() -> list[Recorded]:
        return [m for m in teams.messages(alex.conversation) if POISON_NOTICE in text_of(m)]

    await until(noticed, 90.0)
    idle = await wait_idle(deployment.env, pool, 30.0)
    events = [e for e in pool.events() if e.get("activity_id") == question["id"]]
    attempts = [e for e in events if e["event"] == "start" and e["function"] == "turns"]
    failed = [e for e in events if e["event"] == "failed" and e["function"] == "turns"]
    poisoned = [e for e in events if e["event"] == "poisoned"]
    told = [e for e in events if e["event"] == "done" and e["function"] == "turns_poison"]
    notices = noticed()
    tally = Tally("scale-out poison")
    tally.record(
        [int(e["dequeue_count"]) for e in attempts] == list(range(1, max_dequeue + 1)),
        f"deliveries {[e['dequeue_count'] for e in attempts]}, expected 1..{max_dequeue} (host.json maxDequeueCount)",
    )
    tally.record(len(failed) == max_dequeue, f"{len(failed)} failed deliveries, expected {max_dequeue}")
    tally.record(
        len(poisoned) == 1 and int(poisoned[0]["dequeue_count"]) == max_dequeue,
        f"moved to the poison queue: {poisoned}",
    )
    tally.record(len(told) == 1, f"the poison trigger ran {len(told)} times")
    refs = poison_refs(pool)
    matched = [
        m
        for m in notices
        if (ref := POISON_REF.search(text_of(m))) and refs.get(ref.group(1)) == question["id"]
    ]
    tally.record(len(notices) == 1 and len(matched) == 1, f"poison notices {[text_of(m) for m in notices]}")
    others = [text_of(m) for m in teams.messages(alex.conversation) if m not in notices]
    tally.record(not others, f"other messages reached the rep: {others}")
    refused = [r for r in connector.refused if r.body.get("replyToId") == question["id"]]
    tally.record(len(refused) >= max_dequeue, f"only {len(refused)} replies were attempted")
    tally.record(idle, "the queues did not drain")
    print(
        f"scale-out poison: {len(attempts)} deliveries on pids {sorted({e['pid'] for e in attempts})}, "
        f"{len(refused)} replies refused, notice {[text_of(m) for m in notices]}"
    )
    tally.assert_clean()
