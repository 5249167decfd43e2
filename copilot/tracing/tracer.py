"""The LangChain tracer of one copilot run: LangChain's own, plus what the copilot needs to know.

It remembers, for each tool call id, the tool run that executed it (so an audit row can
link to exactly that run) and names the tool call id in the run's metadata; and it keeps
the outputs of the root's last graph run, which become the root run's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.tracers.langchain import LangChainTracer
from langchain_core.tracers.schemas import Run


@dataclass(frozen=True)
class TracedRun:
    """Where a run is: its id and its trace's (root run's) id."""

    run_id: UUID
    trace_id: UUID


@dataclass
class _Shared:
    """State every copy of one run's tracer shares (LangChain copies tracers for nested runs)."""

    root_id: UUID | None = None
    tool_runs: dict[str, TracedRun] = field(default_factory=dict)
    root_outputs: dict[str, Any] | None = None


class CopilotTracer(LangChainTracer):
    """``LangChainTracer`` that records tool runs by tool call id (one instance per copilot run)."""

    def __init__(self, *args: Any, shared: _Shared | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shared = shared or _Shared()

    def copy_with_metadata_defaults(
        self, *, metadata: Mapping[str, str] | None = None, tags: list[str] | None = None
    ) -> LangChainTracer:
        copy = super().copy_with_metadata_defaults(metadata=metadata, tags=tags)
        if isinstance(copy, CopilotTracer):
            copy.shared = self.shared
        return copy

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Run:
        # The tool call id goes into the run's metadata before the run is posted, so the
        # run can be found (and given feedback) by the call it executed.
        call_id = kwargs.get("tool_call_id")
        if isinstance(call_id, str):
            metadata = {**(metadata or {}), "tool_call_id": call_id}
        run = super().on_tool_start(serialized, input_str, run_id=run_id, metadata=metadata, **kwargs)
        if isinstance(call_id, str):
            self.shared.tool_runs[call_id] = TracedRun(run.id, run.trace_id)
        return run

    def on_chain_end(
        self, outputs: dict[str, Any], *, run_id: UUID, inputs: dict[str, Any] | None = None, **kwargs: Any
    ) -> Run:
        run = super().on_chain_end(outputs, run_id=run_id, inputs=inputs, **kwargs)
        if self.shared.root_id is not None and run.parent_run_id == self.shared.root_id:
            self.shared.root_outputs = run.outputs
        return run

    def tool_run(self, tool_call_id: str) -> TracedRun | None:
        """The run that executed ``tool_call_id`` in this copilot run, if it was traced."""
        return self.shared.tool_runs.get(tool_call_id)

    def live_run(self, run_id: UUID) -> Run | None:
        """A run of this trace that has not ended yet."""
        return self.run_map.get(str(run_id))
