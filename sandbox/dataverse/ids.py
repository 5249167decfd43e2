"""Deterministic GUIDs for sandbox records, so every surface names one record the same way.

A record's Dataverse id is ``uuid5(NAMESPACE, "<kind>:<sandbox id>")``: the seeded
organisation has the same GUIDs in every database seeded from the same seed, and a row
written through the sandbox's own MCP server gets its GUID without any extra state.
"""

from __future__ import annotations

import uuid
from functools import lru_cache

# Fixed, arbitrary: changing it would renumber every record the product may have stored.
NAMESPACE = uuid.UUID("7c1f6a52-3b0e-5d8e-9a51-0d5a7f3c2e61")

Kind = str
"""The sandbox table a record lives in: ``account``, ``contact``, ``opportunity``,
``activity`` or ``systemuser``."""


@lru_cache(maxsize=65536)
def guid_for(kind: Kind, sandbox_id: str) -> str:
    """The Dataverse GUID (lower-case, hyphenated) of sandbox record ``sandbox_id`` of ``kind``."""
    return str(uuid.uuid5(NAMESPACE, f"{kind}:{sandbox_id}"))


def parse_guid(text: str) -> str | None:
    """``text`` as a canonical lower-case GUID, or None when it is not one."""
    try:
        return str(uuid.UUID(text.strip().strip("{}")))
    except ValueError:
        return None
