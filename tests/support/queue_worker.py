"""A queue-worker process standing in for the Azure Functions host, and a pool of them for tests.

Azure Functions Core Tools cannot run here, so ``python -m tests.support.queue_worker``
does what the Functions host does for this app's queue triggers: it imports
``function_app``, finds every registered ``queueTrigger`` function (``turns`` on the turn
queue, ``turns_poison`` on ``<queue>-poison``) and, per queue, loops like the host's
queue listener with the options of ``host.json`` (``extensions.queues``):

* receive up to ``batchSize`` messages, fetching again when no more than
  ``newBatchThreshold`` are still running; poll from 100 ms up to ``maxPollingInterval``
  (doubling, with jitter) while the queue is empty;
* keep each received message invisible while its function runs (the host receives with a
  10-minute visibility timeout and renews it at half-time, from outside the Python worker;
  here a thread, with ``--lease`` seconds, so a killed worker's message comes back in
  seconds instead of minutes);
* call the function with an ``azure.functions.QueueMessage`` carrying the id, body,
  dequeue count and pop receipt, as the Python worker does;
* success: delete the message. Failure: make it visible again after host.json's
  ``visibilityTimeout`` (``--retry-delay`` shortens it), or, from the ``maxDequeueCount``-th
  attempt on, copy it to ``<queue>-poison`` and delete it. A message received with a dequeue
  count already above ``maxDequeueCount`` (its earlier attempts died with their worker)
  goes to the poison queue without running.

Every step is appended to a JSON-lines event file per process (``--events-dir``), written
line by line so a SIGKILL loses nothing already done; :class:`WorkerPool` (the test side)
starts, kills and restarts workers and reads those events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from bench.host_json import HOST_JSON, QueueOptions

PROJECT_ROOT = Path(__file__).resolve().parents[2]

MIN_POLLING_INTERVAL = 0.1
"""The host's first poll delay after an empty receive (it doubles up to maxPollingInterval)."""
HOST_RECEIVE_VISIBILITY = 600
"""What the Functions host receives with (10 minutes, renewed at half-time)."""

logger = logging.getLogger("queue_worker")


# --- host.json --------------------------------------------------------------------------------------


# --- the worker process -------------------------------------------------------------------------------

QueueFunction = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True)
class QueueTrigger:
    """One registered queue-trigger function of the app."""

    function_name: str
    queue_name: str
    connection_setting: str
    function: QueueFunction


def queue_triggers() -> list[QueueTrigger]:
    """Every ``queueTrigger`` function ``function_app`` registers, as the host indexes them."""
    import function_app

    # get_functions() refuses to list the same functions twice (the host calls it once).
    function_app.app.functions_bindings = None
    triggers = []
    for function in function_app.app.get_functions():
        bindings = json.loads(function.get_function_json())["bindings"]
        for binding in bindings:
            if binding.get("type") == "queueTrigger":
                triggers.append(
                    QueueTrigger(
                        function_name=str(function.get_function_name()),
                        queue_name=str(binding["queueName"]),
                        connection_setting=str(binding.get("connection") or "AzureWebJobsStorage"),
                        function=cast(QueueFunction, function.get_user_function()),
                    )
                )
    return triggers


class EventLog:
    """This process's JSON-lines event file (one write per line: a SIGKILL loses nothing done)."""

    def __init__(self, directory: Path, name: str):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}-{os.getpid()}.jsonl"
        self.name = name
        self._file: IO[str] = self.path.open("a", encoding="utf-8", buffering=1)

    def write(self, event: str, **fields: Any) -> None:
        record = {"t": time.time(), "worker": self.name, "pid": os.getpid(), "event": event, **fields}
        self._file.write(json.dumps(record, default=str) + "\n")

    def close(self) -> None:
        self._file.close()


def describe(content: str) -> dict[str, Any]:
    """What a turn envelope is about (for the event log); empty for anything unreadable."""
    try:
        envelope = json.loads(content)
        activity = envelope["activity"]
        value = activity.get("value")
        kind = "decision" if isinstance(value, dict) and value.get("copilot") == "decision" else "message"
        if activity.get("type") != "message":
            kind = str(activity.get("type"))
        return {
            "activity_id": activity.get("id"),
            "activity_type": activity.get("type"),
            "conversation_id": (activity.get("conversation") or {}).get("id"),
            "kind": kind,
            "reply_to_id": activity.get("replyToId"),
        }
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


@dataclass
class _Lease:
    queue_name: str
    message_id: str
    pop_receipt: str
    renew_at: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    lost: str | None = None
    released: bool = False


class LeaseKeeper:
    """Keeps received messages invisible while their functions run, from its own thread.

    The Functions host renews visibility itself, outside the Python worker, so a busy
    or stalled event loop in the worker never lets a running message reappear; a thread
    does the same here. A message's pop receipt changes with every renewal: :meth:`release`
    hands back the current one (waiting for a renewal in progress) for the final delete
    or update.
    """

    def __init__(self, client: Callable[[str], Any], lease_seconds: int):
        self._client = client
        self._lease_seconds = lease_seconds
        self._leases: dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._clients: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def hold(self, queue_name: str, message_id: str, pop_receipt: str) -> None:
        lease = _Lease(queue_name, message_id, pop_receipt, time.monotonic() + self._lease_seconds / 2)
        with self._lock:
            self._leases[message_id] = lease

    def release(self, message_id: str) -> tuple[str, str | None]:
        """Stop renewing; the message's current pop receipt, and why the lease was lost if it was."""
        with self._lock:
            lease = self._leases.pop(message_id)
        with lease.lock:  # a renewal in flight finishes first: its receipt is the valid one
            lease.released = True
            return lease.pop_receipt, lease.lost

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for client in self._clients.values():
            client.close()

    def _run(self) -> None:
        from azure.core.exceptions import AzureError

        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                due = [lease for lease in self._leases.values() if lease.renew_at <= now and not lease.lost]
            for lease in due:
                with lease.lock:
                    if lease.released:
                        continue
                    client = self._clients.get(lease.queue_name)
                    if client is None:
                        client = self._clients[lease.queue_name] = self._client(lease.queue_name)
                    try:
                        updated = client.update_message(
                            lease.message_id, lease.pop_receipt, visibility_timeout=self._lease_seconds
                        )
                    except AzureError as exc:
                        # Someone else holds it now (the lease ran out): the host logs and goes on.
                        lease.lost = f"{type(exc).__name__}: {exc}".splitlines()[0]
                        logger.warning("lost the lease on message %s: %s", lease.message_id, lease.lost)
                        continue
                    lease.pop_receipt = updated.pop_receipt
                    lease.renew_at = time.monotonic() + self._lease_seconds / 2


class Listener:
    """The host's queue listener for one trigger (see the module docstring)."""

    def __init__(
        self,
        trigger: QueueTrigger,
        options: QueueOptions,
        events: EventLog,
        *,
        lease_seconds: int,
        retry_delay: int,
        stopping: asyncio.Event,
    ):
        self.trigger = trigger
        self.options = options
        self.events = events
        self.lease_seconds = lease_seconds
        self.retry_delay = retry_delay
        self.stopping = stopping
        self._deliveries = 0
        self.keeper = LeaseKeeper(self._sync_client, lease_seconds)

    def _policies(self) -> dict[str, Any]:
        from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy

        if self.options.message_encoding != "base64":
            return {}
        return {
            "message_encode_policy": TextBase64EncodePolicy(),
            "message_decode_policy": TextBase64DecodePolicy(),
        }

    def _client(self, queue_name: str) -> Any:
        from azure.storage.queue.aio import QueueClient

        connection = os.environ[self.trigger.connection_setting]
        return QueueClient.from_connection_string(connection, queue_name, **self._policies())

    def _sync_client(self, queue_name: str) -> Any:
        from azure.storage.queue import QueueClient

        connection = os.environ[self.trigger.connection_setting]
        return QueueClient.from_connection_string(connection, queue_name, **self._policies())

    async def run(self) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        queue = self._client(self.trigger.queue_name)
        poison = self._client(f"{self.trigger.queue_name}-poison")
        running: set[asyncio.Task[None]] = set()
        delay = MIN_POLLING_INTERVAL
        try:
            while not self.stopping.is_set():
                if len(running) > self.options.new_batch_threshold:
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    continue
                receiving = asyncio.ensure_future(self._receive(queue))
                stop = asyncio.ensure_future(self.stopping.wait())
                await asyncio.wait({receiving, stop}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                if not receiving.done():
                    # Shutting down: a batch received right now comes back when its lease ends.
                    receiving.cancel()
                    break
                try:
                    received = receiving.result()
                except ResourceNotFoundError:
                    received = []  # the queue does not exist yet (e.g. no poison so far)
                for message in received:
                    task = asyncio.create_task(self._deliver(queue, poison, message))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if received:
                    delay = MIN_POLLING_INTERVAL
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self.options.max_polling_interval)
            if running:
                await asyncio.wait(running)  # drain, like the host on shutdown
        finally:
            self.keeper.close()
            await queue.close()
            await poison.close()

    async def _receive(self, queue: Any) -> list[Any]:
        return [
            m
            async for m in queue.receive_messages(
                messages_per_page=self.options.batch_size,
                max_messages=self.options.batch_size,
                visibility_timeout=self.lease_seconds,
            )
        ]

    async def _deliver(self, queue: Any, poison: Any, message: Any) -> None:
        from azure.core.exceptions import AzureError
        from azure.functions.queue import QueueMessage

        self._deliveries += 1
        delivery = f"{os.getpid()}:{self.trigger.function_name}:{self._deliveries}"
        about = {
            "delivery": delivery,
            "function": self.trigger.function_name,
            "queue": self.trigger.queue_name,
            "message_id": message.id,
            "dequeue_count": message.dequeue_count,
            **describe(str(message.content)),
        }
        if message.dequeue_count > self.options.max_dequeue_count:
            # Its earlier deliveries died with their workers before anyone could decide.
            await self._to_poison(queue, poison, message, message.pop_receipt, about)
            return
        self.events.write("start", **about)
        self.keeper.hold(self.trigger.queue_name, message.id, message.pop_receipt)
        failure: BaseException | None = None
        try:
            await self.trigger.function(
                QueueMessage(
                    id=message.id,
                    body=str(message.content),
                    dequeue_count=message.dequeue_count,
                    expiration_time=message.expires_on,
                    insertion_time=message.inserted_on,
                    time_next_visible=message.next_visible_on,
                    pop_receipt=message.pop_receipt,
                )
            )
        except Exception as exc:
            failure = exc
            logger.exception("%s failed on message %s", self.trigger.function_name, message.id)
        pop_receipt, lost = await asyncio.to_thread(self.keeper.release, message.id)
        if lost is not None:
            # Redelivered meanwhile: whoever holds it now decides; the host only logs this.
            self.events.write("lease_lost", error=lost, succeeded=failure is None, **about)
            return
        try:
            if failure is None:
                await queue.delete_message(message.id, pop_receipt)
                self.events.write("done", **about)
            elif message.dequeue_count >= self.options.max_dequeue_count:
                self.events.write("failed", error=repr(failure), **about)
                await self._to_poison(queue, poison, message, pop_receipt, about)
            else:
                await queue.update_message(message.id, pop_receipt, visibility_timeout=self.retry_delay)
                self.events.write("failed", error=repr(failure), retry_in=self.retry_delay, **about)
        except AzureError as exc:
            # The lease ran out just now: someone else holds the message.
            self.events.write(
                "lease_lost", error=repr(exc).splitlines()[0], succeeded=failure is None, **about
            )

    async def _to_poison(
        self, queue: Any, poison: Any, message: Any, pop_receipt: str, about: dict[str, Any]
    ) -> None:
        from azure.core.exceptions import ResourceExistsError

        with contextlib.suppress(ResourceExistsError):
            await poison.create_queue()
        copied = await poison.send_message(str(message.content))
        await queue.delete_message(message.id, pop_receipt)
        self.events.write("poisoned", poison_message_id=copied.id, **about)


def _watch_parent(parent_pid: int) -> None:
    """Die with the test: a worker whose parent is gone must not linger as an orphan."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(3)


async def serve(args: argparse.Namespace) -> None:
    from functions.host import reset_host

    options = QueueOptions.from_host_json(Path(args.host_json))
    if args.max_dequeue_count is not None:
        options = dataclasses.replace(options, max_dequeue_count=args.max_dequeue_count)
    retry_delay = int(options.visibility_timeout if args.retry_delay is None else args.retry_delay)
    events = EventLog(Path(args.events_dir), args.name)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    triggers = queue_triggers()
    listeners = [
        Listener(
            trigger,
            options,
            events,
            lease_seconds=args.lease,
            retry_delay=retry_delay,
            stopping=stopping,
        )
        for trigger in triggers
    ]
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    events.write(
        "ready",
        queues={t.queue_name: t.function_name for t in triggers},
        max_dequeue_count=options.max_dequeue_count,
        lease=args.lease,
        retry_delay=retry_delay,
    )
    try:
        await asyncio.gather(*(listener.run() for listener in listeners))
    finally:
        await reset_host()
        events.write("stopped")
        events.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--name", default="worker")
    parser.add_argument("--events-dir", required=True)
    parser.add_argument("--host-json", default=str(HOST_JSON))
    parser.add_argument("--lease", type=int, default=HOST_RECEIVE_VISIBILITY, help="receive visibility, s")
    parser.add_argument("--retry-delay", type=int, default=None, help="instead of host.json's")
    parser.add_argument("--max-dequeue-count", type=int, default=None, help="instead of host.json's")
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.name}[%(process)d] %(name)s %(levelname)s %(message)s",
    )
    # The storage SDK logs every HTTP request at INFO: that would drown the app's own log.
    for noisy in ("azure", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    asyncio.run(serve(args))


# --- the test side: a pool of worker processes ------------------------------------------------------


@dataclass
class Worker:
    slot: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


class WorkerPool:
    """Worker processes in named slots: start, SIGKILL, restart, stop; and their events."""

    def __init__(
        self,
        size: int,
        env: dict[str, str],
        directory: Path,
        *,
        lease: int,
        retry_delay: int | None = None,
        max_dequeue_count: int | None = None,
    ):
        self.size = size
        self.env = env
        self.directory = directory
        self.events_dir = directory / "events"
        self.lease = lease
        self.retry_delay = retry_delay
        self.max_dequeue_count = max_dequeue_count
        self.workers: dict[str, Worker] = {}
        self.retired: list[Worker] = []
        self._starts = 0
        self._read: dict[Path, tuple[int, list[dict[str, Any]]]] = {}

    def spawn(self, slot: str) -> Worker:
        self._starts += 1
        log_path = self.directory / f"{slot}-{self._starts}.log"
        command = [
            sys.executable,
            "-m",
            "tests.support.queue_worker",
            "--name",
            slot,
            "--events-dir",
            str(self.events_dir),
            "--lease",
            str(self.lease),
            "--parent-pid",
            str(os.getpid()),
        ]
        if self.retry_delay is not None:
            command += ["--retry-delay", str(self.retry_delay)]
        if self.max_dequeue_count is not None:
            command += ["--max-dequeue-count", str(self.max_dequeue_count)]
        self.directory.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=PROJECT_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        worker = Worker(slot, process, log_path)
        self.workers[slot] = worker
        return worker

    def start(self) -> None:
        for index in range(self.size):
            self.spawn(f"w{index + 1}")

    def kill(self, slot: str) -> Worker:
        """SIGKILL the slot's process (no cleanup of any kind, like a crashed host)."""
        worker = self.workers[slot]
        worker.process.kill()
        worker.process.wait(timeout=10)
        self.retired.append(worker)
        return worker

    def restart(self, slot: str) -> Worker:
        return self.spawn(slot)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every live worker (they drain), then SIGKILL whatever is still there."""
        live = [w for w in self.workers.values() if w.alive()]
        for worker in live:
            worker.process.terminate()
        deadline = time.monotonic() + timeout
        for worker in live:
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(timeout=10)

    def events(self) -> list[dict[str, Any]]:
        """Every event of every worker process so far, in time order (files read incrementally)."""
        found: list[dict[str, Any]] = []
        if not self.events_dir.exists():
            return found
        for path in sorted(self.events_dir.glob("*.jsonl")):
            offset, seen = self._read.get(path, (0, []))
            with path.open("rb") as file:
                file.seek(offset)
                chunk = file.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits for next time
            for line in complete.decode("utf-8").splitlines():
                seen.append(json.loads(line))
            self._read[path] = (offset + len(complete), seen)
            found.extend(seen)
        return sorted(found, key=lambda e: e["t"])

    def ready_pids(self) -> set[int]:
        return {int(e["pid"]) for e in self.events() if e["event"] == "ready"}

    def in_flight(self) -> dict[str, list[dict[str, Any]]]:
        """Per live slot: the deliveries its current process started and has not finished."""
        events = self.events()
        finished = {
            e["delivery"] for e in events if e["event"] in ("done", "failed", "poisoned", "lease_lost")
        }
        busy: dict[str, list[dict[str, Any]]] = {}
        for slot, worker in self.workers.items():
            if not worker.alive():
                continue
            busy[slot] = [
                e
                for e in events
                if e["event"] == "start" and e["pid"] == worker.pid and e["delivery"] not in finished
            ]
        return busy

    def log_tail(self, chars: int = 4000) -> Iterator[tuple[str, str]]:
        for worker in [*self.retired, *self.workers.values()]:
            text = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
            yield f"{worker.slot}[{worker.pid}]", text[-chars:]


if __name__ == "__main__":
    main()
