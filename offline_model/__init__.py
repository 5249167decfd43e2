"""The deterministic offline chat model (the default ``COPILOT_MODEL``), in one module per job.

``model`` is the chat model; ``catalog`` and ``roles`` find which bound tool serves what;
``records`` knows the record ids tool results returned; ``intents`` and ``text`` read the
rep's message; ``state`` reads the question's calls and results; ``plan`` with
``context``, ``lookup``, ``reads``, ``writes`` and ``outcomes`` decides the next step;
``compose`` writes answers; ``summary`` and ``structured`` serve summarisation and forced
tool calls.
"""

from offline_model.model import OfflineChatModel
from offline_model.records import drop_unseen_citations
from offline_model.structured import best_effort_args
from offline_model.summary import extractive_summary, is_summary_request

__all__ = [
    "OfflineChatModel",
    "best_effort_args",
    "drop_unseen_citations",
    "extractive_summary",
    "is_summary_request",
]
