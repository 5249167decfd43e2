"""What a trace may carry: the model's PII masking, and never a token.

Every string of a run's inputs, outputs, metadata and error passes through
:func:`mask_text` (the LangSmith client's ``anonymizer`` hook) before it leaves the
process: emails and phone numbers are redacted exactly as the model's context is
(:func:`copilot.middleware.pii.redact_pii`), and bearer tokens and JWTs (the rep's
delegated tokens, which should never be in a run at all) are removed as a last line of
defence.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from langsmith.anonymizer import create_anonymizer

from copilot.redaction import redact_pii

TOKEN_REDACTED = "[REDACTED_TOKEN]"

_BEARER = re.compile(r"\bbearer\s+[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")

# Deep enough for LangChain's serialised messages inside graph state (the client's default
# of 10 levels would leave tool-call arguments and tool results unscanned).
_MAX_DEPTH = 64
# A run repeats most of its text (the system prompt and history in every model call).
_CACHED_TEXT = 32_768


def _mask(text: str, phone_region: str) -> str:
    text = _JWT.sub(TOKEN_REDACTED, _BEARER.sub(TOKEN_REDACTED, text))
    return redact_pii(text, phone_region)


_cached_mask = lru_cache(maxsize=1024)(_mask)


def mask_text(text: str, phone_region: str) -> str:
    """``text`` without tokens, emails or phone numbers."""
    return _cached_mask(text, phone_region) if len(text) <= _CACHED_TEXT else _mask(text, phone_region)


def trace_anonymizer(phone_region: str) -> Callable[[Any], Any]:
    """The LangSmith client's ``anonymizer``: :func:`mask_text` on every string, at any depth."""

    def replace(value: str, path: list[str | int]) -> str:
        return mask_text(value, phone_region)

    return create_anonymizer(replace, max_depth=_MAX_DEPTH)
