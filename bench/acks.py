"""Ack latency of the Functions HTTP trigger (``messages``) with a real Azurite queue, against a
bare HTTP trigger that only enqueues the body, under N concurrent posts.

The app's trigger authenticates each activity (a channel token the bench signs, validated
by botbuilder against the bench's OpenID metadata), de-duplicates it in PostgreSQL and
enqueues the turn; both triggers run in the bench's stand-in for the Functions host
(:mod:`bench.function_host`), each in its own process, and answer 202.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import httpx
from azure.storage.queue.aio import QueueClient
from cryptography.fernet import Fernet

from bench.azurite import running_azurite
from bench.bots import teams_activity
from bench.channel import running_issuer
from bench.environment import BenchEnvironment
from bench.load import Batch, LoadFailed, alternate, post_batch
from bench.processes import http_server
from bench.sandbox import free_port
from bench.stats import Comparison, Progress
from copilot.settings import LOCAL_APP_ID

SERVICE_URL = "http://127.0.0.1:9/bench-connector/"
"""The activities' serviceUrl: signed into each token, never contacted (an ack sends nothing)."""
OURS_QUEUE, BARE_QUEUE = "bench-turns", "bench-bare"


async def http_acks(env: BenchEnvironment, *, rounds: dict[int, int], progress: Progress) -> list[Comparison]:
    """For each concurrency N (``rounds``: N → batches per side): ack latency and wall time per post."""
    ours_port, bare_port = free_port(), free_port()
    ours_url = f"http://127.0.0.1:{ours_port}/api/messages"
    bare_url = f"http://127.0.0.1:{bare_port}/api/messages"
    question = env.scenarios.bot_question
    with running_issuer(LOCAL_APP_ID) as issuer:
        async with running_azurite(env.work / "azurite") as storage:
            host = {
                **env.variables,
                "MicrosoftAppId": LOCAL_APP_ID,
                "MicrosoftAppPassword": f"bench-{uuid.uuid4().hex}",
                "BOT_CONNECTOR_AUTHORITY": env.sandbox.idp_base_url,
                "BOT_CONNECTOR_CA_BUNDLE": str(env.sandbox.ca_cert_path),
                "COPILOT_TOKEN_ENCRYPTION_KEY": Fernet.generate_key().decode(),
                "TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL": issuer.metadata_url,
                "AzureWebJobsStorage": storage,
            }
            async with (
                http_server(
                    ["-m", "bench.function_host", "--port", str(ours_port)],
                    variables={**host, "COPILOT_TURN_QUEUE": OURS_QUEUE},
                    health_url=f"http://127.0.0.1:{ours_port}/api/health",
                    log_path=env.work / "functions-ours.log",
                ),
                http_server(
                    ["-m", "bench.function_host", "--bare", "--port", str(bare_port)],
                    variables={**host, "COPILOT_TURN_QUEUE": BARE_QUEUE},
                    health_url=f"http://127.0.0.1:{bare_port}/api/health",
                    log_path=env.work / "functions-bare.log",
                ),
                httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=200)) as client,
            ):

                def signed(body: dict[str, Any]) -> dict[str, str]:
                    return {"Authorization": issuer.authorization(str(body["serviceUrl"]))}

                posted: Counter[str] = Counter()

                def batch(url: str, queue: str) -> Batch:
                    async def run(n: int) -> tuple[list[float], float]:
                        bodies = [teams_activity(env, SERVICE_URL, question) for _ in range(n)]
                        posted[queue] += n
                        return await post_batch(client, url, bodies, headers=signed, expect=(202,))

                    return run

                ours, bare = batch(ours_url, OURS_QUEUE), batch(bare_url, BARE_QUEUE)
                # Warm-up: the first post opens the edge (imports, pool, queue, OpenID metadata).
                await ours(1)
                await bare(1)
                results = await alternate(
                    "http ack",
                    "ack (Functions HTTP trigger → Azurite queue)",
                    "bare HTTP trigger enqueueing the body on Azurite",
                    ours,
                    bare,
                    rounds=rounds,
                    progress=progress,
                )
            # Every 202 really queued its activity (a refusal or a duplicate would not have).
            for queue, n in posted.items():
                if await queued(storage, queue) != n:
                    raise LoadFailed(f"{n} posts were acknowledged but {await queued(storage, queue)} queued")
            return results


async def queued(storage: str, queue: str) -> int:
    """Messages waiting on ``queue`` (nothing consumes the bench's queues)."""
    async with QueueClient.from_connection_string(storage, queue) as client:
        properties = await client.get_queue_properties()
    return int(properties.approximate_message_count or 0)
