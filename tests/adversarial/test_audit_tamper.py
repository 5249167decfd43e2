"""Proof suite: every tamper with the audit log is found by ``audit verify`` (invariant 6).

One database gets a keyed, anchored chain written through ``audit.append`` (the older
half under key ``k1``, the rest after a rotation to ``k2``), anchored only as the product
anchors it: each row after its commit (no extra anchor of the head, so the newest row is
protected by its own after-commit anchor, or by nothing). Each trial then tampers as a superuser would: triggers disabled,
constraints dropped where needed, rows edited, deleted, reordered, renumbered, forged
(with a correct *plain* sha256 hash as the old scheme had, or an HMAC under a wrong key),
re-chained, key ids swapped, anchors forged; verifies on the same connection; and rolls
the transaction back (forged anchors are taken back out of the store). Every tamper must
be reported, and a removed tail reported as truncation back to the last anchor. Removing
the newest row alone (the tamper the old anchor-on-the-next-write scheme missed) is one of
the kinds tried.

``make soak`` runs 1,000+ tampers; CI runs about 150.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from copilot.persistence import audit
from copilot.persistence.audit import AuditConfig, AuditEntry
from copilot.persistence.audit_anchor import chain_id, sign_anchor
from copilot.persistence.audit_keys import AuditKey, AuditKeyring
from copilot.persistence.migrations import migrate
from tests.adversarial.counts import Tally, count

pytestmark = pytest.mark.integration

ROWS = 40
TAMPERS = count(150, 1000)
SEED = 20250307

K1 = AuditKey("k1", secrets.token_bytes(32))
K2 = AuditKey("k2", secrets.token_bytes(32))
OLD_KEYS = AuditKeyring((K1,), "test")
KEYS = AuditKeyring((K2, K1), "test")

T0 = datetime(2025, 3, 4, 9, 30, 15, 123456, tzinfo=UTC)
_ENTRY_COLUMNS = [
    "tenant_id",
    "rep_aad_id",
    "thread_id",
    "tool_call_id",
    "tool",
    "target_record_id",
    "record_version_read",
    "original_args",
    "edited_args",
    "decision",
    "crm_response",
    "proposed_at",
    "decided_at",
    "executed_at",
    "trace_url",
]

Conn = psycopg.AsyncConnection[Any]


class MemoryAnchorStore:
    """An :class:`AnchorStore` in a list, so trials can add forged records and take them back."""

    def __init__(self, records: list[str] | None = None):
        self.records: list[str] = list(records or [])

    @property
    def location(self) -> str:
        return "memory"

    async def append(self, record: str) -> None:
        self.records.append(record)

    async def read(self) -> list[str]:
        return list(self.records)


def entry(n: int, rng: random.Random) -> AuditEntry:
    edited = rng.random() < 0.3
    base = AuditEntry(
        tenant_id=rng.choice(["tenant-a", "tenant-b"]),
        rep_aad_id=rng.choice(["rep-alex", "rep-megan", "rep-priya"]),
        thread_id="thread-" + rng.choice("xyz") * 24,
        tool_call_id=f"call-{n}",
        tool=rng.choice(["log_activity", "update_opportunity"]),
        target_record_id=rng.choice([f"acc-{n:03d}", f"opp-{n:03d}", None]),
        record_version_read=rng.choice([n, None]),
        original_args={"subject": f"Call {n}", "minutes": rng.randint(5, 90), "tags": ["a", n]},
        edited_args={"subject": f"Edited {n}", "amount": 1250.5} if edited else None,
        decision="edit" if edited else "approve",
        crm_response={"id": f"act-{n}", "version": rng.randint(1, 9), "ok": True},
        proposed_at=rng.choice([T0 + timedelta(minutes=n), None]),
        decided_at=T0 + timedelta(minutes=n, seconds=20),
        executed_at=T0 + timedelta(minutes=n, seconds=21),
        trace_url=rng.choice([None, f"https://smith.example/trace/{n}"]),
    )
    return base


@dataclass
class Base:
    ids: list[int]
    store: MemoryAnchorStore
    config: AuditConfig
    chain: str

    @property
    def head(self) -> int:
        return self.ids[-1]

    def anchored_ids(self) -> list[int]:
        """The rows some anchor names, oldest first."""
        return sorted({json.loads(r)["last_id"] for r in self.store.records} - {None})

    def anchors_up_to(self, last_id: int) -> MemoryAnchorStore:
        """A store holding only the anchors of rows up to ``last_id`` (older anchors)."""
        kept = [r for r in self.store.records if (json.loads(r)["last_id"] or 0) <= last_id]
        return MemoryAnchorStore(kept)


@dataclass(frozen=True)
class Expect:
    what: str
    first_bad: int | None = None
    """The row verify must name (``None``: any report of tampering will do)."""
    truncated: bool = False
    anchor_problem: bool = False
    config: AuditConfig | None = None
    """Verify with this config instead of the base one (e.g. fewer anchors)."""


async def _scalar(conn: Conn, query: str, params: Any = None) -> Any:
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


def _params(values: dict[str, Any]) -> list[Any]:
    return [Jsonb(values[c]) if isinstance(values[c], (dict, list)) else values[c] for c in _ENTRY_COLUMNS]


async def _forge_row(
    conn: Conn,
    row_id: int,
    values: dict[str, Any],
    prev_hash: str,
    key_id: str | None,
    digest: Callable[[int, str, dict[str, Any]], str],
) -> None:
    """Insert a row, then give it the hash ``digest`` computes over what PostgreSQL stored
    (exactly what a careful forger, or the old verifier, would hash)."""
    await conn.execute(
        f"INSERT INTO audit_log (id, {', '.join(_ENTRY_COLUMNS)}, key_id, prev_hash, row_hash)"
        f" VALUES (%s, {', '.join(['%s'] * len(_ENTRY_COLUMNS))}, %s, %s, %s)",
        (row_id, *_params(values), key_id, prev_hash, f"pending-{row_id}"),
    )
    await _rehash(conn, row_id, digest)


async def _rehash(conn: Conn, row_id: int, digest: Callable[[int, str, dict[str, Any]], str]) -> str:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT * FROM audit_log WHERE id = %s", (row_id,))
        row = await cur.fetchone()
        assert row is not None
        new_hash = digest(row_id, str(row["prev_hash"]), row)
        await cur.execute("UPDATE audit_log SET row_hash = %s WHERE id = %s", (new_hash, row_id))
    return new_hash


def plain(_row_id: int, prev: str, values: dict[str, Any]) -> str:
    """The old, unkeyed scheme: correct, and computable by anyone."""
    return audit.legacy_row_hash(prev, values)


def hmac_with(key: AuditKey) -> Callable[[int, str, dict[str, Any]], str]:
    def digest(row_id: int, prev: str, values: dict[str, Any]) -> str:
        return audit.keyed_row_hash(key, row_id, prev, values)

    return digest


def wrong_key(key_id: str) -> AuditKey:
    return AuditKey(key_id, secrets.token_bytes(32))


async def _head_hash(conn: Conn, row_id: int) -> str:
    return str(await _scalar(conn, "SELECT row_hash FROM audit_log WHERE id = %s", (row_id,)))


# --- tampers: each changes the database (or the anchor store) and says what verify must find


async def field_edit(conn: Conn, base: Base, rng: random.Random) -> Expect:
    row_id = rng.choice(base.ids)
    column = rng.choice(_ENTRY_COLUMNS)
    edits: dict[str, str] = {
        "tenant_id": "tenant_id = tenant_id || '-x'",
        "rep_aad_id": "rep_aad_id = 'rep-mallory'",
        "thread_id": "thread_id = thread_id || 'q'",
        "tool_call_id": f"tool_call_id = 'call-forged-{rng.randrange(10**9)}'",
        "tool": "tool = CASE tool WHEN 'log_activity' THEN 'update_opportunity' ELSE 'log_activity' END",
        "target_record_id": "target_record_id = CASE WHEN target_record_id IS NULL THEN 'acc-999'"
        " ELSE NULL END",
        "record_version_read": "record_version_read = coalesce(record_version_read + 1, 1)",
        "original_args": rng.choice(
            [
                "original_args = original_args || '{\"minutes\": 999}'",
                "original_args = original_args - 'tags'",
                "original_args = jsonb_set(original_args, '{minutes}', '30.0')",
            ]
        ),
        "edited_args": "edited_args = CASE WHEN edited_args IS NULL THEN '{}'::jsonb ELSE NULL END",
        "decision": "decision = CASE decision WHEN 'approve' THEN 'edit' ELSE 'approve' END",
        "crm_response": "crm_response = crm_response || '{\"version\": 100}'",
        "proposed_at": "proposed_at = CASE WHEN proposed_at IS NULL THEN decided_at"
        " ELSE proposed_at + interval '1 microsecond' END",
        "decided_at": "decided_at = decided_at - interval '1 second'",
        "executed_at": "executed_at = executed_at + interval '1 microsecond'",
        "trace_url": "trace_url = CASE WHEN trace_url IS NULL THEN 'https://evil.example' ELSE NULL END",
    }
    await conn.execute(f"UPDATE audit_log SET {edits[column]} WHERE id = %s", (row_id,))
    return Expect(f"edit {column} of row {row_id}", first_bad=row_id)


async def chain_column_edit(conn: Conn, base: Base, rng: random.Random) -> Expect:
    row_id = rng.choice(base.ids)
    column = rng.choice(["prev_hash", "row_hash", "key_id", "key_id_unknown"])
    if column == "prev_hash":
        await conn.execute(
            "UPDATE audit_log SET prev_hash = %s WHERE id = %s", (secrets.token_hex(32), row_id)
        )
    elif column == "row_hash":
        await conn.execute(
            "UPDATE audit_log SET row_hash = %s WHERE id = %s", (secrets.token_hex(32), row_id)
        )
    elif column == "key_id":  # the other configured key: a swapped key id
        await conn.execute(
            "UPDATE audit_log SET key_id = CASE key_id WHEN 'k1' THEN 'k2' ELSE 'k1' END WHERE id = %s",
            (row_id,),
        )
    else:
        await conn.execute("UPDATE audit_log SET key_id = 'k9' WHERE id = %s", (row_id,))
    return Expect(f"edit {column} of row {row_id}", first_bad=row_id)


async def swap_key_ids(conn: Conn, base: Base, rng: random.Random) -> Expect:
    half = len(base.ids) // 2
    a, b = rng.choice(base.ids[:half]), rng.choice(base.ids[half:])
    await conn.execute(
        "UPDATE audit_log SET key_id = CASE id WHEN %s THEN 'k2' ELSE 'k1' END WHERE id IN (%s, %s)",
        (a, a, b),
    )
    return Expect(f"swap key ids of rows {a} (k1) and {b} (k2)", first_bad=a)


async def forged_plain_append(conn: Conn, base: Base, rng: random.Random) -> Expect:
    key_id = rng.choice(["k1", "k2", None])
    if key_id is None:
        await conn.execute("ALTER TABLE audit_log DROP CONSTRAINT audit_rows_are_keyed")
    forged_id = base.head + rng.randint(1, 3)
    values = audit._entry_values(entry(10_000 + forged_id, rng))
    await _forge_row(conn, forged_id, values, await _head_hash(conn, base.head), key_id, plain)
    return Expect(f"append a forged row {forged_id} (plain sha256, key id {key_id})", first_bad=forged_id)


async def forged_wrong_key_append(conn: Conn, base: Base, rng: random.Random) -> Expect:
    key_id = rng.choice(["k1", "k2", "k3"])
    forged_id = base.head + 1
    values = audit._entry_values(entry(20_000 + forged_id, rng))
    await _forge_row(
        conn, forged_id, values, await _head_hash(conn, base.head), key_id, hmac_with(wrong_key(key_id))
    )
    return Expect(f"append a forged row {forged_id} (HMAC under a wrong key {key_id})", first_bad=forged_id)


async def rechain(conn: Conn, base: Base, rng: random.Random) -> Expect:
    """Alter one row and recompute every hash from there on, as the old scheme allowed."""
    start = rng.randrange(len(base.ids))
    row_id = base.ids[start]
    digest = rng.choice([plain, hmac_with(wrong_key("k2")), hmac_with(wrong_key("k1"))])
    await conn.execute(
        'UPDATE audit_log SET crm_response = \'{"id": "act-forged"}\' WHERE id = %s', (row_id,)
    )
    prev = audit.GENESIS if start == 0 else await _head_hash(conn, base.ids[start - 1])
    for later in base.ids[start:]:
        await conn.execute("UPDATE audit_log SET prev_hash = %s WHERE id = %s", (prev, later))
        prev = await _rehash(conn, later, digest)
    return Expect(f"alter row {row_id} and re-chain the rest", first_bad=row_id)


async def delete_middle(conn: Conn, base: Base, rng: random.Random) -> Expect:
    n = rng.randint(1, 3)
    start = rng.randrange(0, len(base.ids) - n)  # at least one row survives after the gap
    gone = base.ids[start : start + n]
    await conn.execute("DELETE FROM audit_log WHERE id = ANY(%s)", (gone,))
    return Expect(f"delete rows {gone}", first_bad=base.ids[start + n])


async def delete_scattered(conn: Conn, base: Base, rng: random.Random) -> Expect:
    gone = sorted(rng.sample(base.ids[:-1], rng.randint(2, 6)))
    await conn.execute("DELETE FROM audit_log WHERE id = ANY(%s)", (gone,))
    after_first_gap = next(r for r in base.ids[base.ids.index(gone[0]) :] if r not in gone)
    return Expect(f"delete scattered rows {gone}", first_bad=after_first_gap)


async def delete_tail(conn: Conn, base: Base, rng: random.Random) -> Expect:
    """Remove the newest rows, measured against all anchors or only older ones."""
    if rng.random() < 0.5:
        n = rng.randint(1, len(base.ids) - 1)
        await conn.execute("DELETE FROM audit_log WHERE id >= %s", (base.ids[-n],))
        return Expect(f"remove the newest {n} rows", first_bad=base.head, truncated=True)
    anchored = rng.choice([row_id for row_id in base.anchored_ids() if row_id != base.head])
    older = replace(base.config, anchors=base.anchors_up_to(anchored))
    cut = rng.randint(0, base.ids.index(anchored))  # the anchored row goes too
    await conn.execute("DELETE FROM audit_log WHERE id >= %s", (base.ids[cut],))
    return Expect(
        f"remove rows from {base.ids[cut]} on, last anchor at row {anchored}",
        first_bad=anchored,
        truncated=True,
        config=older,
    )


async def delete_newest_row(conn: Conn, base: Base, rng: random.Random) -> Expect:
    """Remove only the newest row (nothing was written after it), perhaps with a stand-in."""
    await conn.execute("DELETE FROM audit_log WHERE id = %s", (base.head,))
    if rng.random() < 0.5:
        return Expect(f"remove the newest row {base.head}", first_bad=base.head, truncated=True)
    # Put a forged row in its place, linked to the row before it.
    prev = await _head_hash(conn, base.ids[-2])
    digest = rng.choice([plain, hmac_with(wrong_key("k2"))])
    await _forge_row(conn, base.head, audit._entry_values(entry(40_000, rng)), prev, "k2", digest)
    return Expect(f"replace the newest row {base.head} with a forged one", first_bad=base.head)


async def delete_all(conn: Conn, base: Base, rng: random.Random) -> Expect:
    await conn.execute(rng.choice(["DELETE FROM audit_log", "TRUNCATE audit_log"]))
    return Expect("remove every row", first_bad=base.head, truncated=True)


async def truncate_and_continue(conn: Conn, base: Base, rng: random.Random) -> Expect:
    """Cut the tail, then append plausible rows after what is left (plain or wrong-key hashes)."""
    n = rng.randint(1, len(base.ids) - 2)
    await conn.execute("DELETE FROM audit_log WHERE id >= %s", (base.ids[-n],))
    prev = await _head_hash(conn, base.ids[-n - 1])
    forged_id = base.head + 1
    digest = rng.choice([plain, hmac_with(wrong_key("k2"))])
    await _forge_row(conn, forged_id, audit._entry_values(entry(30_000, rng)), prev, "k2", digest)
    return Expect(f"remove the newest {n} rows and append a forged one", first_bad=forged_id)


async def reorder_swap(conn: Conn, base: Base, rng: random.Random) -> Expect:
    a, b = sorted(rng.sample(base.ids, 2))
    for old, new in ((a, -1), (b, a), (-1, b)):
        await conn.execute("UPDATE audit_log SET id = %s WHERE id = %s", (new, old))
    return Expect(f"swap rows {a} and {b}", first_bad=a)


async def move_to_end(conn: Conn, base: Base, rng: random.Random) -> Expect:
    row_id = rng.choice(base.ids[:-1])
    await conn.execute("UPDATE audit_log SET id = %s WHERE id = %s", (base.head + 1, row_id))
    return Expect(f"move row {row_id} to the end", first_bad=base.ids[base.ids.index(row_id) + 1])


async def renumber(conn: Conn, base: Base, rng: random.Random) -> Expect:
    """Shift ids while keeping order and links: the HMAC covers the id."""
    start = rng.randrange(len(base.ids))
    shift = rng.randint(1000, 5000)
    await conn.execute("UPDATE audit_log SET id = id + %s WHERE id >= %s", (shift, base.ids[start]))
    return Expect(f"renumber rows from {base.ids[start]} by +{shift}", first_bad=base.ids[start] + shift)


async def forged_anchor(conn: Conn, base: Base, rng: random.Random) -> Expect:
    """Add a forged record to the anchor store (taken back out after the trial)."""
    kind = rng.choice(["random_sig", "edited", "wrong_key", "unknown_kid", "malformed", "other_chain_sig"])
    record: str
    if kind == "random_sig":
        real = sign_anchor(K2, chain=base.chain, last_id=base.head + 5, head_hash="f" * 64, rows=99)
        record = json.dumps({**json.loads(real.to_record()), "sig": secrets.token_hex(32)})
    elif kind == "edited":
        doctored = json.loads(rng.choice(base.store.records))
        field, value = rng.choice(
            [
                ("last_id", (doctored["last_id"] or 0) + rng.randint(1, 50)),
                ("rows", doctored["rows"] + 1),
                ("head_hash", secrets.token_hex(32)),
                ("time", (datetime.now(UTC) + timedelta(days=1)).isoformat()),
                ("key_id", "k1" if doctored["key_id"] == "k2" else "k2"),
            ]
        )
        doctored[field] = value
        record = json.dumps(doctored)
    elif kind == "wrong_key":
        record = sign_anchor(
            wrong_key(rng.choice(["k1", "k2"])),
            chain=base.chain,
            last_id=base.head + 3,
            head_hash="a" * 64,
            rows=1,
        ).to_record()
    elif kind == "unknown_kid":
        record = sign_anchor(
            wrong_key("k7"), chain=base.chain, last_id=base.head, head_hash="a" * 64, rows=1
        ).to_record()
    elif kind == "malformed":
        record = rng.choice(["{", "[]", '{"v": 1}', "not json", json.dumps({"v": 2, "chain": base.chain})])
    else:  # a genuine anchor of another chain, relabelled as ours
        other = json.loads(
            sign_anchor(K2, chain="0/other", last_id=7, head_hash="b" * 64, rows=7).to_record()
        )
        record = json.dumps({**other, "chain": base.chain})
    base.store.records.append(record)
    return Expect(f"forged anchor ({kind})", anchor_problem=True)


async def truncate_and_forge_anchor(conn: Conn, base: Base, rng: random.Random) -> Expect:
    """Cut the tail and add an anchor for the new head: without the key it cannot verify."""
    n = rng.randint(1, len(base.ids) - 1)
    await conn.execute("DELETE FROM audit_log WHERE id >= %s", (base.ids[-n],))
    new_head = base.ids[-n - 1]
    forged = sign_anchor(
        wrong_key("k2"),
        chain=base.chain,
        last_id=new_head,
        head_hash=await _head_hash(conn, new_head),
        rows=len(base.ids) - n,
    )
    base.store.records.append(forged.to_record())
    return Expect(f"remove the newest {n} rows and forge an anchor for row {new_head}", anchor_problem=True)


TAMPERS_BY_KIND: list[Callable[[Conn, Base, random.Random], Awaitable[Expect]]] = [
    field_edit,
    field_edit,
    chain_column_edit,
    swap_key_ids,
    forged_plain_append,
    forged_plain_append,
    forged_wrong_key_append,
    rechain,
    delete_middle,
    delete_scattered,
    delete_tail,
    delete_tail,
    delete_newest_row,
    delete_newest_row,
    delete_all,
    truncate_and_continue,
    reorder_swap,
    move_to_end,
    renumber,
    forged_anchor,
    truncate_and_forge_anchor,
]


@pytest.fixture
async def base(db_conn: Conn) -> Base:
    """The untouched chain every trial starts from: ROWS rows, a key rotation half-way."""
    await migrate(db_conn)
    rng = random.Random(SEED)
    store = MemoryAnchorStore()
    # COPILOT_AUDIT_ANCHOR_EVERY's default (1), as deployed; db_conn is autocommit, so each
    # append commits on its own, as the write path's transaction does.
    before_rotation = AuditConfig(OLD_KEYS, store, anchor_every=1)
    after_rotation = AuditConfig(KEYS, store, anchor_every=1)
    ids = []
    for n in range(1, ROWS + 1):
        config = before_rotation if n <= ROWS // 2 else after_rotation
        ids.append(await audit.append(db_conn, entry(n, rng), config=config))
    return Base(ids, store, after_rotation, await chain_id(db_conn))


def _judge(report: audit.VerifyReport, expect: Expect) -> str | None:
    """Why ``report`` misses ``expect`` (None when it found the tamper as required)."""
    if report.ok:
        return "verify passed"
    if expect.anchor_problem:
        return (
            None
            if report.problem and "anchor" in report.problem and report.first_bad_id is None
            else (f"not reported as an anchor problem: {report.problem}")
        )
    if expect.truncated and not (
        report.truncated and "truncated back to the last anchor" in (report.problem or "")
    ):
        return f"not reported as truncation: {report.problem}"
    if expect.first_bad is not None and report.first_bad_id != expect.first_bad:
        return f"named row {report.first_bad_id}, expected {expect.first_bad}: {report.problem}"
    return None


async def test_every_tamper_is_detected(db_conn: Conn, base: Base) -> None:
    tally = Tally("audit tamper (verify detects every tamper)")
    rng = random.Random(SEED + 1)
    pristine = list(base.store.records)
    assert (await audit.verify(db_conn, config=base.config)).ok, "the untouched chain verifies"
    for trial in range(TAMPERS):
        tamper = TAMPERS_BY_KIND[trial % len(TAMPERS_BY_KIND)]
        async with db_conn.transaction(force_rollback=True):
            await db_conn.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
            expect = await tamper(db_conn, base, rng)
            report = await audit.verify(db_conn, config=expect.config or base.config)
        base.store.records = list(pristine)
        miss = _judge(report, expect)
        tally.record(miss is None, f"{expect.what}: {miss}")
        if trial % 50 == 49:
            # The rollback really restored the chain: no later trial passes on a broken base.
            assert (await audit.verify(db_conn, config=base.config)).ok, f"base broken after {expect.what}"
    assert (await audit.verify(db_conn, config=base.config)).ok
    tally.assert_clean()


async def test_the_only_undetectable_removal_is_the_tail_written_since_the_last_anchor(
    db_conn: Conn, base: Base
) -> None:
    """The documented window: rows newer than every anchor can vanish unseen, nothing older."""
    anchored = [row_id for row_id in base.anchored_ids() if row_id < base.ids[-3]][-1]
    older = replace(base.config, anchors=base.anchors_up_to(anchored))
    async with db_conn.transaction(force_rollback=True):
        await db_conn.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        await db_conn.execute("DELETE FROM audit_log WHERE id > %s", (anchored,))
        within_window = await audit.verify(db_conn, config=older)
        await db_conn.execute("DELETE FROM audit_log WHERE id = %s", (anchored,))
        past_it = await audit.verify(db_conn, config=older)
    assert within_window.ok
    assert (past_it.ok, past_it.truncated, past_it.first_bad_id) == (False, True, anchored)
