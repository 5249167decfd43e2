"""Shared plumbing of the adversarial suites: sandbox state, audit rows, canonical arguments."""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from typing import Any

from pydantic import ValidationError

from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.settings import Settings
from copilot.writes import WRITE_TOOL_SCHEMAS
from tests.support.sandbox_process import SandboxProcess

WRITE_TOOLS = tuple(WRITE_TOOL_SCHEMAS)
"""The write tools registered when this module was imported (the built-in ones); suites that
must also see a tool registered later (a test's throwaway entry) call :func:`write_tool_names`."""


def write_tool_names() -> tuple[str, ...]:
    """Every write tool registered now, in registration order (the registry is the one list)."""
    return tuple(WRITE_TOOL_SCHEMAS)


def make_nonce(length: int = 10) -> str:
    """A random tag of letters only: text with long digit runs is redacted as a phone number
    before the model sees it, which would cut a run's tag out of what the model reads."""
    return uuid.uuid4().hex[:length].translate(str.maketrans("0123456789", "ghijklmnop"))


_DRAINED: dict[int, deque[str]] = {}


def drain_output(sandbox: SandboxProcess) -> deque[str]:
    """Keep reading the sandbox's stdout pipe (its last lines are kept for debugging).

    ``start_sandbox`` pipes the server's output and nobody reads it: once about 64 KB
    of request log has accumulated the server blocks writing to the pipe and every
    request times out. Long runs (the soak counts) hit that within minutes.
    """
    pid = sandbox.process.pid
    if pid in _DRAINED or sandbox.process.stdout is None:
        return _DRAINED.setdefault(pid, deque(maxlen=200))
    lines: deque[str] = deque(maxlen=200)
    _DRAINED[pid] = lines
    stream = sandbox.process.stdout

    def pump() -> None:
        for line in stream:
            lines.append(line)

    threading.Thread(target=pump, name=f"sandbox-{pid}-output", daemon=True).start()
    return lines


def export(sandbox: SandboxProcess) -> dict[str, list[dict[str, Any]]]:
    """The whole sandbox state (CRM tables and drafts), as ``python -m sandbox export`` prints it."""
    state: dict[str, list[dict[str, Any]]] = sandbox.admin("GET", "/admin/export")
    return state


async def audit_rows(settings: Settings, thread_id: str) -> list[audit.StoredAuditEntry]:
    async with connect(settings) as conn:
        return await audit.list_entries(conn, thread_id=thread_id, limit=1000)


async def audit_count(settings: Settings) -> int:
    """How many audit rows exist (all threads)."""
    async with connect(settings) as conn:
        return await _count(conn)


async def audit_state(settings: Settings, thread_id: str) -> tuple[list[audit.StoredAuditEntry], int]:
    """The thread's audit rows and the number of rows in the whole log (one connection)."""
    async with connect(settings) as conn:
        return await audit.list_entries(conn, thread_id=thread_id, limit=1000), await _count(conn)


async def _count(conn: Any) -> int:
    cur = await conn.execute("SELECT count(*) AS n FROM audit_log")
    row = await cur.fetchone()
    return int(row["n"]) if row is not None else 0


def canon(value: Any) -> str:
    """Canonical JSON of tool arguments (for comparing what was shown with what ran)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def normalized(tool: str, args: Any) -> dict[str, Any] | None:
    """``args`` as the write tool's schema reads them, or None if they are not valid for it."""
    schema = WRITE_TOOL_SCHEMAS.get(tool)
    if schema is None or not isinstance(args, dict):
        return None
    try:
        return schema.model_validate(args).model_dump(mode="json", exclude_none=True)
    except ValidationError:
        return None
