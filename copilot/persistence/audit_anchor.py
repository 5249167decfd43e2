"""Signed checkpoints of the audit chain's head, kept outside the database (invariant 6).

A chain alone cannot show that its newest rows were removed: what is left is a valid,
shorter chain. So the head is *anchored*: a checkpoint naming ``last_id``, ``head_hash``,
``rows`` and ``time`` is signed with the audit HMAC key (its ``key_id`` recorded) and
appended to storage the database's users cannot rewrite. ``audit verify`` then requires
every anchored row to still be on the chain; an anchor naming a row the table no longer
has means the log was truncated back to (at least) that anchor. An anchor whose
signature does not verify is a forgery and itself a failure.

Anchors name their chain (the server's system identifier and the database name), so one
store can serve several databases (tests, staging next to production).

Stores implement :class:`AnchorStore`; :func:`default_anchor_store` picks one from the
settings (``COPILOT_AUDIT_ANCHOR_STORE``). This module ships :class:`FileAnchorStore` (JSON
lines, appended with ``O_APPEND``), the local-development default under
``<data_dir>/audit/anchors.jsonl``; :mod:`copilot.persistence.audit_blob_anchor` ships
``BlobAnchorStore`` (Azure Blob Storage append blobs, identity-based auth), the store a
deployment uses.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, assert_never

from psycopg import AsyncConnection

from copilot.errors import AnchorStoreError, ConfigurationError
from copilot.persistence.audit_keys import AuditKey, AuditKeyring
from copilot.settings import AnchorStoreKind, Settings

ANCHOR_VERSION = 1
_SIGNED_PREFIX = b"copilot-audit-anchor/v1\n"
_FIELDS = ("v", "chain", "last_id", "head_hash", "rows", "time", "key_id", "sig")

CHAIN_ID_SQL = "SELECT system_identifier::text || '/' || current_database() AS chain FROM pg_control_system()"


class AnchorStore(Protocol):
    """Append-only storage of anchor records (one JSON object per record, no newlines).

    Implementations must never rewrite or drop a record they accepted: an Azure Blob
    *append blob* (optionally with an immutability policy) fits, a plain file only by
    convention. Both methods raise :class:`AnchorStoreError` when the storage fails.
    """

    @property
    def location(self) -> str:
        """Where the records live (for messages)."""
        ...

    async def append(self, record: str) -> None:
        """Durably append one record."""
        ...

    async def read(self) -> list[str]:
        """Every record, oldest first (empty when nothing was ever appended)."""
        ...


class FileAnchorStore:
    """Anchors as JSON lines in a local file, appended with ``O_APPEND`` and fsynced.

    ``O_APPEND`` makes each record's write land at the end even with several writer
    processes; the file is created mode 0600 in a 0700 directory.
    """

    def __init__(self, path: Path):
        self.path = path

    @property
    def location(self) -> str:
        return str(self.path)

    async def append(self, record: str) -> None:
        """Append ``record`` as one line."""
        if "\n" in record:
            raise ValueError("an anchor record must be one line")
        await asyncio.to_thread(self._append, (record + "\n").encode("utf-8"))

    def _append(self, data: bytes) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                # One write() per record: with O_APPEND, records of concurrent writers
                # do not interleave on a local file system.
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write ({written} of {len(data)} bytes)")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise AnchorStoreError(f"could not append to the audit anchor file {self.path}: {exc}") from exc

    async def read(self) -> list[str]:
        """Every line (without its newline); no file yet = no anchors."""
        return await asyncio.to_thread(self._read)

    def _read(self) -> list[str]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise AnchorStoreError(f"could not read the audit anchor file {self.path}: {exc}") from exc
        return text.splitlines()


def default_anchor_store(settings: Settings) -> AnchorStore:
    """The store these settings select (``COPILOT_AUDIT_ANCHOR_STORE``).

    ``file``: ``COPILOT_AUDIT_ANCHOR_FILE``, else (local only) the data dir's. ``blob``: append
    blobs in ``COPILOT_AUDIT_ANCHOR_CONTAINER`` at ``COPILOT_AUDIT_ANCHOR_ACCOUNT_URL`` with the
    managed identity ``COPILOT_AUDIT_ANCHOR_CLIENT_ID`` (else ``DefaultAzureCredential``), or,
    outside a deployment, ``COPILOT_AUDIT_ANCHOR_CONNECTION`` (Azurite). Raises
    ConfigurationError when the selected store is not fully configured. Builds clients only:
    nothing is read or written until the first append or read.
    """
    kind: AnchorStoreKind = settings.audit_anchor_store
    if kind == "file":
        return _file_store(settings)
    if kind == "blob":
        return _blob_store(settings)
    assert_never(kind)


def _file_store(settings: Settings) -> FileAnchorStore:
    if settings.audit_anchor_file is not None:
        return FileAnchorStore(settings.audit_anchor_file)
    if settings.environment == "deployed":
        raise ConfigurationError(
            "COPILOT_AUDIT_ANCHOR_FILE is not set: a deployment must anchor the audit log on "
            "append-only storage outside the database (a local default file would not survive); "
            "in Azure set COPILOT_AUDIT_ANCHOR_STORE=blob and COPILOT_AUDIT_ANCHOR_ACCOUNT_URL"
        )
    return FileAnchorStore(settings.data_dir / "audit" / "anchors.jsonl")


def _blob_store(settings: Settings) -> AnchorStore:
    # Imported here: the blob SDK is loaded only by processes that anchor in blobs.
    from copilot.persistence.audit_blob_anchor import BlobAnchorStore

    container = settings.audit_anchor_container
    if settings.audit_anchor_connection is not None:
        if settings.environment == "deployed":
            raise ConfigurationError(
                "COPILOT_AUDIT_ANCHOR_CONNECTION is for Azurite and local development only: a "
                "deployment authenticates to the anchor store by identity (unset it and set "
                "COPILOT_AUDIT_ANCHOR_ACCOUNT_URL and COPILOT_AUDIT_ANCHOR_CLIENT_ID)"
            )
        return BlobAnchorStore.with_connection_string(
            settings.audit_anchor_connection.get_secret_value(), container
        )
    if settings.audit_anchor_account_url is None:
        raise ConfigurationError(
            "COPILOT_AUDIT_ANCHOR_STORE=blob needs COPILOT_AUDIT_ANCHOR_ACCOUNT_URL (the storage "
            "account's blob endpoint, https://<account>.blob.core.windows.net)"
        )
    from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

    credential = (
        ManagedIdentityCredential(client_id=settings.audit_anchor_client_id)
        if settings.audit_anchor_client_id
        else DefaultAzureCredential()
    )
    return BlobAnchorStore.with_identity(settings.audit_anchor_account_url, container, credential)


@dataclass(frozen=True)
class Anchor:
    """One signed checkpoint of a chain's head."""

    chain: str
    last_id: int | None
    """The head row's id; ``None`` for an empty log."""
    head_hash: str
    rows: int
    time: datetime
    key_id: str
    signature: str

    def to_record(self) -> str:
        """The record appended to the store (one line of JSON)."""
        return json.dumps(
            {
                **_signed_fields(self.chain, self.last_id, self.head_hash, self.rows, self.time, self.key_id),
                "sig": self.signature,
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def _signed_fields(
    chain: str, last_id: int | None, head_hash: str, rows: int, time: datetime, key_id: str
) -> dict[str, Any]:
    return {
        "v": ANCHOR_VERSION,
        "chain": chain,
        "last_id": last_id,
        "head_hash": head_hash,
        "rows": rows,
        "time": time.astimezone(UTC).isoformat(),
        "key_id": key_id,
    }


def _message(fields: dict[str, Any]) -> bytes:
    return _SIGNED_PREFIX + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode("utf-8")


def sign_anchor(
    key: AuditKey, *, chain: str, last_id: int | None, head_hash: str, rows: int, time: datetime | None = None
) -> Anchor:
    """A checkpoint of ``chain``'s head signed with ``key``."""
    when = (time or datetime.now(UTC)).astimezone(UTC)
    signature = key.mac(_message(_signed_fields(chain, last_id, head_hash, rows, when, key.key_id)))
    return Anchor(chain, last_id, head_hash, rows, when, key.key_id, signature)


async def chain_id(conn: AsyncConnection[Any]) -> str:
    """The identity anchors of this database carry: server system identifier / database name."""
    cur = await conn.execute(CHAIN_ID_SQL)
    row = await cur.fetchone()
    assert row is not None
    return str(row["chain"] if isinstance(row, dict) else row[0])


@dataclass(frozen=True)
class AnchorCheck:
    """The anchors of one chain whose signatures verified, or the first problem found."""

    anchors: tuple[Anchor, ...] = ()
    problem: str | None = None

    @property
    def latest(self) -> Anchor | None:
        """The anchor naming the newest row (what truncation is measured against)."""
        if not self.anchors:
            return None
        return max(self.anchors, key=lambda a: (-1 if a.last_id is None else a.last_id, a.rows, a.time))


def check_anchors(records: Sequence[str], keyring: AuditKeyring, chain: str, location: str) -> AnchorCheck:
    """Parse every record and verify the signatures of ``chain``'s anchors.

    A record that is not a well-formed anchor, or an anchor of this chain with an unknown
    key id or a bad signature, is a problem: the store has been tampered with.
    """
    found: list[Anchor] = []
    for number, record in enumerate(records, start=1):
        where = f"anchor {number} in {location}"
        parsed = _parse(record)
        if parsed is None:
            return AnchorCheck(problem=f"{where} is not a well-formed anchor record (the store was altered)")
        if parsed["chain"] != chain:
            continue
        key = keyring.get(parsed["key_id"])
        if key is None:
            return AnchorCheck(
                problem=f"{where} is signed with key id {parsed['key_id']!r}, which is not among the "
                f"configured audit keys {list(keyring.key_ids)} (configure it, or the anchor is forged)"
            )
        signed = {name: parsed[name] for name in _FIELDS if name != "sig"}
        if not key.matches(_message(signed), parsed["sig"]):
            return AnchorCheck(problem=f"{where} has a bad signature: a forged anchor")
        found.append(
            Anchor(
                chain=parsed["chain"],
                last_id=parsed["last_id"],
                head_hash=parsed["head_hash"],
                rows=parsed["rows"],
                time=datetime.fromisoformat(parsed["time"]),
                key_id=parsed["key_id"],
                signature=parsed["sig"],
            )
        )
    return AnchorCheck(anchors=tuple(found))


def _parse(record: str) -> dict[str, Any] | None:
    try:
        value = json.loads(record)
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) != set(_FIELDS) or value["v"] != ANCHOR_VERSION:
        return None
    last_id = value["last_id"]
    well_typed = (
        all(isinstance(value[name], str) for name in ("chain", "head_hash", "time", "key_id", "sig"))
        and (last_id is None or (isinstance(last_id, int) and not isinstance(last_id, bool)))
        and isinstance(value["rows"], int)
        and not isinstance(value["rows"], bool)
    )
    if not well_typed:
        return None
    try:
        datetime.fromisoformat(value["time"])
    except ValueError:
        return None
    return value
