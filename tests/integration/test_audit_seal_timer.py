"""The Function App's ``audit_seal`` timer: seals the head, and fails loudly on a removed newest row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from copilot.errors import AuditTamperDetected
from copilot.persistence import audit
from functions.host import get_edge
from tests.integration.test_audit import _as_owner_without_triggers, make_entry
from tests.integration.test_function_app import (  # noqa: F401 - the Functions tests' fixtures
    app_env,
    azurite,
    user_function,
)

pytestmark = pytest.mark.integration


class Timer:
    past_due = False


async def test_the_audit_seal_timer_verifies_and_fails_when_the_newest_row_is_removed(
    app_env: Any,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
    db_conn: psycopg.AsyncConnection[Any],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("COPILOT_AUDIT_ANCHOR_FILE", str(tmp_path / "anchors.jsonl"))
    edge = await get_edge()
    async with edge.pool.connection() as conn:  # the app's login, as the write path appends
        newest = await audit.append(conn, make_entry(1))
    seal = user_function("audit_seal")

    await seal(Timer())  # intact: nothing new to anchor (the row was anchored at its commit)
    anchors = (tmp_path / "anchors.jsonl").read_text().splitlines()
    assert len(anchors) == 1
    assert f'"last_id":{newest}' in anchors[0]

    await _as_owner_without_triggers(db_conn, f"DELETE FROM audit_log WHERE id = {newest}")
    with pytest.raises(AuditTamperDetected, match="truncated back to the last anchor"):
        await seal(Timer())
