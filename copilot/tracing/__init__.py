"""LangSmith tracing: run tree and metadata, masking, audit links, events, feedback, experiments."""

from copilot.tracing.runs import (
    Rating,
    RunKind,
    RunTrace,
    TraceEvent,
    Tracing,
    current_trace,
    model_labels,
    open_tracing,
    trace_event,
)

__all__ = [
    "Rating",
    "RunKind",
    "RunTrace",
    "TraceEvent",
    "Tracing",
    "current_trace",
    "model_labels",
    "open_tracing",
    "trace_event",
]
