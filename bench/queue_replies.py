"""Reply latency and throughput through the queue worker, against a minimal echo bot.

The deployed path: each activity is posted, with a channel token the bench signs (as
:mod:`bench.acks` does), to the Function App's ``messages`` HTTP trigger, which
authenticates, de-duplicates and enqueues it on a real Azurite queue and answers 202; a
worker process (``python -m bench.function_host --worker``) polls that queue with
host.json's batch settings (at most batchSize + newBatchThreshold = 6 turns at once) and
calls the registered ``turns`` function on each message, which runs the turn (offline
model, the sandbox CRM) and replies through the Bot Connector with the bot's app-only token
(issued by the sandbox identity provider) — here the bench's stand-in connector. The rep is
signed in as a Teams SSO exchange leaves them: their token stored encrypted in the bench's
database.

A turn's latency runs from its POST to its answer (the first ``message`` activity of its
conversation) arriving at the connector; typing / progress updates do not count. A turn
with no answer within :data:`REPLY_TIMEOUT_SECONDS`, a refused POST or an answer that is
the bot's error message or a sign-in card is an error: counted, and no latency. A batch's
wall time runs from its first POST to its last answer (or time-out); wall time / N is the
inverse of turns per second. The baseline is ``python -m bench.echo_bot``, measured the same
way (its reply arrives inside the POST). Batches alternate: ours, echo, ours, echo...

The sandbox has only a handful of reps, and the bench's scenario is built on the records of
the ``--rep`` it signs in, so every concurrent turn is that one rep, each in a conversation
of its own (distinct conversation ids: distinct threads).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from cryptography.fernet import Fernet

from bench.azurite import running_azurite
from bench.bots import Connector, teams_activity
from bench.channel import running_issuer
from bench.environment import BenchEnvironment
from bench.host_json import QueueOptions
from bench.load import LoadFailed, TimedWithErrors, alternate
from bench.processes import http_server
from bench.sandbox import free_port
from bench.stats import Comparison, Progress

REPLY_TIMEOUT_SECONDS = 30.0
"""A turn not answered within this (from its POST) is an error."""
WARMUP_TIMEOUT_SECONDS = 180.0
"""The worker's first turn opens the host (imports the agent stack, signs the rep in)."""
QUEUE = "bench-replies"
OAUTH_CARD = "application/vnd.microsoft.card.oauth"
FAILED_MARK = "something went wrong"
"""In the bot's error replies (``functions.turns.FAILED_MESSAGE``, the handler's)."""

Post = Callable[[dict[str, Any]], Awaitable[httpx.Response]]


def _answered(activity: dict[str, Any]) -> bool:
    """An answer, not a sign-in card or the bot's apology for a failed turn."""
    attachments = activity.get("attachments") or []
    if any(isinstance(a, dict) and a.get("contentType") == OAUTH_CARD for a in attachments):
        return False
    return FAILED_MARK not in str(activity.get("text") or "").lower()


async def _turn(
    connector: Connector, post: Post, body: dict[str, Any], expect: tuple[int, ...], within: float
) -> tuple[float | None, str]:
    """One turn: its latency (None: an error) and what happened."""
    conversation = str(body["conversation"]["id"])
    arrived = connector.expect(conversation)
    start = time.perf_counter()
    try:
        response = await asyncio.wait_for(post(body), within)
        if response.status_code not in expect:
            return None, f"answered {response.status_code}: {response.text[:200]}"
        remaining = max(0.0, within - (time.perf_counter() - start))
        at = await asyncio.wait_for(arrived, remaining)
        reply = connector.first_message.get(conversation, {})
        if not _answered(reply):
            return None, f"replied {str(reply.get('text') or reply.get('attachments'))[:200]}"
        return at - start, "answered"
    except TimeoutError:
        return None, f"no answer within {within:.0f} s"
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        connector.forget(conversation)


async def _batch(
    env: BenchEnvironment,
    connector: Connector,
    post: Post,
    n: int,
    *,
    expect: tuple[int, ...],
    within: float = REPLY_TIMEOUT_SECONDS,
    progress: Progress | None = None,
) -> TimedWithErrors:
    question = env.scenarios.bot_question
    bodies = [teams_activity(env, connector.url, question) for _ in range(n)]
    start = time.perf_counter()
    outcomes = await asyncio.gather(*(_turn(connector, post, b, expect, within) for b in bodies))
    wall = time.perf_counter() - start
    failures = [what for latency, what in outcomes if latency is None]
    if failures and progress is not None:
        progress(f"bench: queue reply x{n}: {len(failures)} errors, e.g. {failures[0]}")
    return [latency for latency, _ in outcomes if latency is not None], wall, len(failures)


async def queue_replies(
    env: BenchEnvironment, *, rounds: dict[int, int], progress: Progress
) -> list[Comparison]:
    """For each concurrency N (``rounds``: N → batches per side): reply latency and wall time per turn."""
    connector = Connector()
    await connector.start()
    trigger_port, worker_port, echo_port = free_port(), free_port(), free_port()
    trigger_url = f"http://127.0.0.1:{trigger_port}/api/messages"
    echo_url = f"http://127.0.0.1:{echo_port}/api/messages"
    app_id = env.settings.obo_client_id
    key = Fernet.generate_key().decode()
    results: list[Comparison] = []
    try:
        with running_issuer(app_id) as issuer:
            async with running_azurite(env.work / "azurite-replies") as storage:
                host = {
                    **env.variables,
                    # The sandbox's app registration: the worker gets real Bot Connector tokens.
                    "MicrosoftAppId": app_id,
                    "MicrosoftAppPassword": env.settings.obo_client_secret.get_secret_value(),
                    "BOT_CONNECTOR_AUTHORITY": env.sandbox.idp_base_url,
                    "BOT_CONNECTOR_CA_BUNDLE": str(env.sandbox.ca_cert_path),
                    "COPILOT_TOKEN_ENCRYPTION_KEY": key,
                    "TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL": issuer.metadata_url,
                    "AzureWebJobsStorage": storage,
                    "COPILOT_TURN_QUEUE": QUEUE,
                }
                # What a Teams SSO token exchange leaves behind (the rep's token, stored),
                # done by the worker itself as it starts: copilot/ imports nothing of bot/.
                worker = {**host, "BENCH_SSO_ASSERTION": env.assertion}
                async with (
                    http_server(
                        ["-m", "bench.function_host", "--port", str(trigger_port)],
                        variables=host,
                        health_url=f"http://127.0.0.1:{trigger_port}/api/health",
                        log_path=env.work / "functions-trigger.log",
                    ),
                    http_server(
                        ["-m", "bench.function_host", "--worker", "--port", str(worker_port)],
                        variables=worker,
                        health_url=f"http://127.0.0.1:{worker_port}/api/health",
                        log_path=env.work / "functions-worker.log",
                    ),
                    http_server(
                        ["-m", "bench.echo_bot", "--port", str(echo_port)],
                        variables=env.variables,
                        health_url=f"http://127.0.0.1:{echo_port}/api/health",
                        log_path=env.work / "echo-queue.log",
                    ),
                    httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=200)) as client,
                ):

                    async def to_trigger(body: dict[str, Any]) -> httpx.Response:
                        headers = {"Authorization": issuer.authorization(str(body["serviceUrl"]))}
                        return await client.post(trigger_url, json=body, headers=headers)

                    async def to_echo(body: dict[str, Any]) -> httpx.Response:
                        return await client.post(echo_url, json=body)

                    async def ours(n: int) -> TimedWithErrors:
                        return await _batch(env, connector, to_trigger, n, expect=(202,), progress=progress)

                    async def echo(n: int) -> TimedWithErrors:
                        return await _batch(env, connector, to_echo, n, expect=(200, 201), progress=progress)

                    # Warm-up: the worker's first turn opens the host; the echo bot's, botbuilder.
                    for name, post, expect in (("ours", to_trigger, (202,)), ("echo", to_echo, (200, 201))):
                        body = teams_activity(env, connector.url, env.scenarios.bot_question)
                        latency, what = await _turn(connector, post, body, expect, WARMUP_TIMEOUT_SECONDS)
                        if latency is None:
                            raise LoadFailed(f"the {name} warm-up turn failed: {what}")
                    results = await alternate(
                        "queue reply",
                        "reply via the queue worker (POST → HTTP trigger → Azurite → turns → "
                        f"connector; one rep, a conversation each, ≤{_most_at_once()} turns at once)",
                        "minimal botbuilder echo bot",
                        ours,
                        echo,
                        rounds=rounds,
                        progress=progress,
                    )
                    health = await client.get(f"http://127.0.0.1:{worker_port}/api/health")
                    most = int(health.json()["most_running"])
                    progress(f"bench: the queue worker ran at most {most} turns at once")
                    if most > _most_at_once():
                        raise LoadFailed(
                            f"the worker ran {most} turns at once, host.json allows {_most_at_once()}"
                        )
    finally:
        await connector.stop()
    return results


def _most_at_once() -> int:
    return QueueOptions.from_host_json().most_at_once
