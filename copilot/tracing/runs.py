"""LangSmith tracing of the copilot's runs, configured from ``LANGSMITH_*``.

:class:`Tracing` is the process's: one LangSmith client (whose ``anonymizer`` masks every
string, :mod:`copilot.tracing.masking`), the project, and the pseudonym key. Each turn
and each decision round is one root run (``copilot.turn`` / ``copilot.decision``, opened
by :meth:`Tracing.run` in ``CopilotService._run``) with its graph runs below it, every
run tagged and carrying the run metadata: tenant, the rep's pseudonym, thread, the
models configured, and (tool runs) the tool call id.

While a root run is open, :func:`current_trace` is its :class:`RunTrace`: code anywhere
in the run (middleware, the write guard, the runner) records what happened through it
(:func:`trace_event`), links an audit row to the tool run that executed the write
(:meth:`RunTrace.url_for_tool_call`), or sends feedback on the root run.

With ``LANGSMITH_TRACING`` off, :meth:`Tracing.run` yields an empty config, nothing is
built or sent, and every function here returns at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManager, BaseCallbackManager
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableLambda, ensure_config
from langsmith import Client, uuid7
from langsmith import utils as ls_utils
from langsmith.schemas import TracerSession

from copilot.errors import ConfigurationError, InvalidInput
from copilot.identity import RepIdentity
from copilot.settings import Settings
from copilot.tracing import untraced
from copilot.tracing.masking import mask_text, trace_anonymizer
from copilot.tracing.pseudonym import load_pseudonym_key, rep_pseudonym
from copilot.tracing.tracer import CopilotTracer, TracedRun, _Shared

logger = logging.getLogger(__name__)

RunKind = Literal["turn", "decision"]
"""A root run: a rep's question (``run_turn``) or a round of decisions (``decide``)."""

TraceEvent = Literal[
    "rejection",
    "edit",
    "conflict",
    "model_call_limit",
    "fallback",
    "breaker_open",
    "ungrounded",
    "gate_fallback",
    "unrequested_write",
]
"""What the copilot records in a trace beyond LangChain's own runs: each is a tag on the
root run and a run of its own (``copilot.<event>``, tagged ``<event>``) where it happened;
a rejection is also feedback on the root run."""

Rating = Literal["like", "dislike"]
"""A rep's verdict on an answer (Teams' feedback reactions)."""

RATING_KEY = "rep_rating"
REJECTION_KEY = "rejection"
_RESOLVE_RETRY_SECONDS = 60.0
START_WAIT_SECONDS = 5.0
"""At most this long at start-up for LangSmith, and again at shutdown for queued traces."""

_CURRENT: ContextVar[RunTrace | None] = ContextVar("copilot_trace", default=None)


def current_trace() -> RunTrace | None:
    """The root run open in this task, or ``None`` (tracing off, or outside a run)."""
    return _CURRENT.get()


def trace_event(event: TraceEvent, **details: Any) -> None:
    """Record ``event`` in the current run, where it happens; nothing when not tracing."""
    trace = _CURRENT.get()
    if trace is not None:
        trace.event(event, details)


def _echo(details: dict[str, Any]) -> dict[str, Any]:
    return details


def _model_label(model: Any) -> str:
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return f"{_provider(model)}:{name}" if isinstance(name, str) and name else _provider(model)


def _provider(model: Any) -> str:
    """``openai``, ``azure_openai``…: the last part of a LangChain integration's serialisation
    namespace (``["langchain", "chat_models", "openai"]``); any other model by its class."""
    if isinstance(model, BaseChatModel):
        namespace = model.get_lc_namespace()
        if len(namespace) > 1 and namespace[0] == "langchain":
            return namespace[-1]
    return type(model).__name__.lower()


def model_labels(models: Sequence[Any]) -> list[str]:
    """``provider:model`` of each model (for run metadata)."""
    return [_model_label(m) for m in models]


@dataclass
class RunTrace:
    """One open root run: where events, audit links and feedback of this run go."""

    tracing: Tracing
    tracer: CopilotTracer
    run_id: uuid.UUID
    callbacks: AsyncCallbackManager = field(repr=False)
    """The root run's child manager: the parent of everything in the run."""

    def _here(self) -> BaseCallbackManager:
        """The innermost run of this trace open in this task (a graph node, or the root)."""
        callbacks = ensure_config().get("callbacks")
        if isinstance(callbacks, BaseCallbackManager) and any(
            isinstance(h, CopilotTracer) and h.shared is self.tracer.shared for h in callbacks.handlers
        ):
            return callbacks
        return self.callbacks

    def tag(self, tag: str) -> None:
        """Tag the root run (sent when it ends)."""
        root = self.tracer.live_run(self.run_id)
        if root is not None and tag not in (root.tags or []):
            root.tags = [*(root.tags or []), tag]

    def event(self, event: TraceEvent, details: dict[str, Any]) -> None:
        """A ``copilot.<event>`` run tagged ``<event>`` where it happened, and the root tagged."""
        RunnableLambda(_echo, name=f"copilot.{event}").invoke(
            details,
            {"callbacks": self._here(), "tags": [event], "metadata": {"copilot_event": event}},
        )
        self.tag(event)

    def feedback(
        self, key: str, *, score: float | None = None, value: Any = None, comment: str | None = None
    ) -> None:
        """Feedback on the root run (queued with its trace; comments are masked)."""
        self.tracing.send_feedback(self.run_id, key, score=score, value=value, comment=comment)

    def record_rejection(self, tool: str, tool_call_id: str, reason: str) -> None:
        """A rejected proposal: a ``rejection`` event, and feedback (score 0, the reason as
        its comment) on the root run."""
        self.event("rejection", {"tool": tool, "tool_call_id": tool_call_id, "reason": reason})
        self.feedback(
            REJECTION_KEY, score=0.0, value={"tool": tool, "tool_call_id": tool_call_id}, comment=reason
        )

    def url_for_tool_call(self, tool_call_id: str) -> str | None:
        """The LangSmith URL of the tool run that executed ``tool_call_id`` in this run."""
        found = self.tracer.tool_run(tool_call_id)
        return self.tracing.run_url(found) if found is not None else None


class Tracing:
    """The process's LangSmith tracing (``Tracing.off()``: none)."""

    def __init__(
        self,
        settings: Settings | None,
        *,
        client: Client | None = None,
        key: bytes | None = None,
        models: Sequence[str] = (),
    ):
        self.settings = settings
        self.client = client
        if client is not None:
            untraced.mark_tracing()
        self._key = key
        self.models = list(models)
        self.project: TracerSession | None = None
        self._resolving = threading.Lock()
        self._last_attempt = 0.0
        # Feedback leaves from a thread of its own: the client sends it with the trace when
        # it can, but otherwise posts it synchronously (with retries), never on a rep's turn.
        self._feedback = ThreadPoolExecutor(max_workers=1, thread_name_prefix="langsmith-feedback")
        self._sending: set[Future[None]] = set()
        self._sending_lock = threading.Lock()

    @classmethod
    def off(cls) -> Tracing:
        return cls(None)

    @property
    def enabled(self) -> bool:
        return self.client is not None

    @property
    def project_name(self) -> str:
        assert self.settings is not None
        return self.settings.langsmith_project

    def pseudonym(self, identity: RepIdentity) -> str:
        assert self._key is not None
        return rep_pseudonym(self._key, identity)

    # --- the run tree ---------------------------------------------------------------------

    @asynccontextmanager
    async def run(
        self, kind: RunKind, identity: RepIdentity, thread_id: str
    ) -> AsyncIterator[dict[str, Any]]:
        """A root run around one turn or decision round; yields the config its graph runs take."""
        if self.client is None:
            yield {}
            return
        shared = _Shared()
        tracer = CopilotTracer(project_name=self.project_name, client=self.client, shared=shared)
        tags = ["copilot", kind]
        metadata = {
            "tenant_id": identity.tenant_id,
            "rep": self.pseudonym(identity),
            "thread_id": thread_id,
            "copilot_run": kind,
            "model": self.models[0] if self.models else None,
            "fallback_models": self.models[1:],
        }
        manager = AsyncCallbackManager(
            handlers=[tracer],
            inheritable_handlers=[tracer],
            tags=tags,
            inheritable_tags=tags,
            metadata=metadata,
            inheritable_metadata=metadata,
        )
        root_id = uuid7()  # time-ordered, as LangSmith expects of run ids
        shared.root_id = root_id
        run_manager = await manager.on_chain_start(
            None, {"thread_id": thread_id, "kind": kind}, run_id=root_id, name=f"copilot.{kind}"
        )
        trace = RunTrace(self, tracer, root_id, run_manager.get_child())
        token = _CURRENT.set(trace)
        try:
            yield {"callbacks": trace.callbacks}
        except BaseException as exc:
            await run_manager.on_chain_error(exc)
            raise
        else:
            root = tracer.live_run(root_id)
            if root is not None and shared.tool_runs:
                # A new dict: the one the run started with is shared with its children's.
                root.extra["metadata"] = {
                    **root.extra.get("metadata", {}),
                    "tool_call_ids": list(shared.tool_runs),
                }
            await run_manager.on_chain_end(shared.root_outputs or {})
        finally:
            _CURRENT.reset(token)

    # --- links and feedback -----------------------------------------------------------------

    def resolve_project(self) -> None:
        """Find (or create) the project, for run URLs; blocking. A failure is logged, and
        retried at most once a minute when a URL is needed."""
        assert self.client is not None
        with self._resolving:
            if self.project is not None:
                return
            self._last_attempt = time.monotonic()
            try:
                try:
                    self.project = self.client.read_project(project_name=self.project_name)
                except ls_utils.LangSmithNotFoundError:
                    self.project = self.client.create_project(self.project_name, upsert=True)
            except (ls_utils.LangSmithError, OSError) as exc:
                logger.warning(
                    "LangSmith project %r not resolved (no trace links yet): %s", self.project_name, exc
                )

    def run_url(self, run: TracedRun) -> str | None:
        """The LangSmith UI URL of ``run`` (``None`` until the project is known)."""
        assert self.client is not None
        assert self.settings is not None
        project = self.project
        if project is None:
            if time.monotonic() - self._last_attempt >= _RESOLVE_RETRY_SECONDS:
                threading.Thread(target=self.resolve_project, name="langsmith-project", daemon=True).start()
            return None
        host = ls_utils.get_host_url(self.settings.langsmith_web_url, self.client.api_url)
        return f"{host}/o/{project.tenant_id}/projects/p/{project.id}/r/{run.run_id}?trace_id={run.trace_id}"

    def send_feedback(
        self,
        run_id: uuid.UUID,
        key: str,
        *,
        score: float | None = None,
        value: Any = None,
        comment: str | None = None,
        trace_id: uuid.UUID | None = None,
    ) -> None:
        """Feedback on a run of this process's traces, sent in the background (never blocking)."""
        assert self.client is not None
        assert self.settings is not None
        client = self.client
        masked = mask_text(comment, self.settings.phone_region) if comment else None

        project = self.project.id if self.project is not None else None

        def send() -> None:
            client.create_feedback(
                run_id,
                key,
                score=score,
                value=value,
                comment=masked,
                trace_id=trace_id or run_id,
                session_id=project,
            )

        future = self._feedback.submit(send)
        with self._sending_lock:
            self._sending.add(future)
        future.add_done_callback(self._sent)

    def _sent(self, future: Future[None]) -> None:
        with self._sending_lock:
            self._sending.discard(future)
        if future.exception() is not None:
            logger.warning("LangSmith feedback not sent: %s", future.exception())

    async def record_feedback(self, run_id: str, rating: Rating, comment: str | None = None) -> bool:
        """A rep's thumbs up / down (and comment) on an answer: LangSmith feedback on its run.

        ``run_id`` is ``TurnResult.run_id`` of the answer (a root run, so also its trace id).
        Returns False, sending nothing, when tracing is off. The comment is masked like the
        model's context.
        """
        if self.client is None:
            return False
        try:
            run = uuid.UUID(run_id)
        except (ValueError, TypeError) as exc:
            raise InvalidInput(f"not a run id: {run_id!r}") from exc
        if rating not in ("like", "dislike"):
            raise InvalidInput(f"rating must be 'like' or 'dislike', got {rating!r}")
        self.send_feedback(
            run, RATING_KEY, score=1.0 if rating == "like" else 0.0, value=rating, comment=comment
        )
        return True

    # --- lifecycle ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now, feedback included (blocking; ``None``: however long it takes)."""
        if self.client is not None:
            with self._sending_lock:
                sending = list(self._sending)
            wait(sending, timeout=timeout)
            self.client.flush(timeout=timeout)

    async def aclose(self) -> None:
        """Send what is queued (for a few seconds at most), then stop the client's threads."""
        if self.client is not None:
            await asyncio.to_thread(self.flush, START_WAIT_SECONDS)
            self._feedback.shutdown(wait=False, cancel_futures=True)
            await asyncio.to_thread(self.client.close, 0)


def langsmith_client(settings: Settings) -> Client:
    """A LangSmith client from ``LANGSMITH_*`` whose anonymizer masks every string it sends."""
    try:
        return Client(
            api_url=settings.langsmith_endpoint,
            api_key=settings.langsmith_api_key.get_secret_value() if settings.langsmith_api_key else None,
            workspace_id=settings.langsmith_workspace_id,
            web_url=settings.langsmith_web_url,
            anonymizer=trace_anonymizer(settings.phone_region),
        )
    except ls_utils.LangSmithUserError as exc:
        raise ConfigurationError(f"LangSmith tracing is misconfigured: {exc}") from exc


async def open_tracing(settings: Settings, *, models: Sequence[str] = ()) -> Tracing:
    """The process's tracing: off unless ``LANGSMITH_TRACING``; ``models`` name the primary
    and fallback models for run metadata."""
    if not settings.langsmith_tracing:
        untraced.install()  # middleware hooks' untraced bookkeeping stays on the loop
        return Tracing.off()
    tracing = Tracing(
        settings, client=langsmith_client(settings), key=load_pseudonym_key(settings), models=models
    )
    # The project before the first run, so that its writes' audit rows can link to their
    # runs; a LangSmith that does not answer in time delays start-up no longer than this
    # (the lookup carries on in its thread, and later rows get their links).
    try:
        await asyncio.wait_for(asyncio.to_thread(tracing.resolve_project), timeout=START_WAIT_SECONDS)
    except TimeoutError:
        logger.warning(
            "LangSmith did not answer in %.0f s; tracing goes on in the background", START_WAIT_SECONDS
        )
    return tracing
