"""Audit anchors in Azure Blob Storage append blobs (an :class:`~copilot.persistence.audit_anchor.AnchorStore`).

An append blob only grows: each anchor record is one *Append Block* (the service commits a
block atomically at the blob's end, so records of concurrent appenders never interleave),
and, with the container's immutability policy (time-based retention with protected append
writes, which the deployment template sets), nobody can rewrite or delete a committed block,
nor the blob. Without that policy a principal with write rights could delete and recreate
the blob; the signatures still expose an edited record, not a dropped one.

One append blob holds at most 50,000 blocks, so records go to a sequence of blobs
``<prefix>000000.jsonl``, ``<prefix>000001.jsonl``, …: an appender moves to the next blob
when the service reports :data:`BLOCKS_PER_BLOB` committed blocks (or refuses with
``BlockCountExceedsLimit``). Reading lists them in order; a gap in the sequence, or a blob
that is not an append blob (replaced by a *Put Blob*), is reported as an altered store
(:class:`~copilot.errors.AnchorStoreAltered`).

Creating a blob is conditional (``If-None-Match: *``): of two appenders that find the next
blob missing, one creates it and the other appends to it; an unconditional create would
replace the blob the first one already appended to. Appends themselves need no
``appendpos`` condition: every record is a whole block, wherever it lands.

Authentication is by identity in a deployment (a user-assigned managed identity's client id,
else ``DefaultAzureCredential``), with the Storage Blob Data Contributor role on the
container; a connection string (an account key) is accepted only outside a deployment, for
Azurite. The SDK's synchronous client runs in a worker thread (as the file store's I/O
does): it is bound to no event loop and keeps its credential's token cache for the process.
"""

from __future__ import annotations

import asyncio
import re
import threading
from contextlib import suppress
from typing import Any

from azure.core import MatchConditions
from azure.core.credentials import TokenCredential
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobType, ContainerClient

from copilot.errors import AnchorStoreAltered, AnchorStoreError

BLOCKS_PER_BLOB = 49_000
"""Move on to the next blob at this many committed blocks (the service's limit is 50,000:
the margin lets appenders that have not yet seen the count keep appending)."""

DEFAULT_PREFIX = "anchors-"
_SEQUENCE = re.compile(r"(\d{6})\.jsonl")


class BlobAnchorStore:
    """Anchor records as lines in a sequence of append blobs in one container."""

    def __init__(
        self,
        container: ContainerClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        blocks_per_blob: int = BLOCKS_PER_BLOB,
    ):
        if blocks_per_blob < 1:
            raise ValueError("blocks_per_blob must be at least 1")
        self.container = container
        self.prefix = prefix
        self.blocks_per_blob = blocks_per_blob
        self._sequence: int | None = None
        """The blob this process appends to (found by listing on first use)."""
        self._lock = threading.Lock()

    @classmethod
    def with_identity(
        cls, account_url: str, container: str, credential: TokenCredential, **options: Any
    ) -> BlobAnchorStore:
        """A store authenticated by an Entra identity (a deployment's managed identity)."""
        return cls(ContainerClient(account_url, container, credential=credential), **options)

    @classmethod
    def with_connection_string(
        cls, connection_string: str, container: str, **options: Any
    ) -> BlobAnchorStore:
        """A store authenticated by a connection string: Azurite, local development and tests only."""
        return cls(ContainerClient.from_connection_string(connection_string, container), **options)

    @property
    def location(self) -> str:
        return f"{self.container.url}/{self.prefix}*.jsonl"

    def blob_name(self, sequence: int) -> str:
        """The name of the ``sequence``-th blob."""
        return f"{self.prefix}{sequence:06d}.jsonl"

    async def append(self, record: str) -> None:
        """Append ``record`` as one line, in one Append Block."""
        if "\n" in record:
            raise ValueError("an anchor record must be one line")
        await asyncio.to_thread(self._append, (record + "\n").encode("utf-8"))

    async def read(self) -> list[str]:
        """Every record, blob by blob in sequence order; no blob yet = no anchors."""
        return await asyncio.to_thread(self._read)

    def _append(self, data: bytes) -> None:
        try:
            sequence = self._current_sequence()
            while True:
                blob = self.container.get_blob_client(self.blob_name(sequence))
                try:
                    result = blob.append_block(data)
                except ResourceNotFoundError as exc:
                    if _error_code(exc) == "ContainerNotFound":
                        raise AnchorStoreError(
                            f"the audit anchor container {self.container.url} does not exist (the "
                            "deployment template creates it, with its immutability policy)"
                        ) from exc
                    self._create(sequence)
                    continue
                except HttpResponseError as exc:
                    if _error_code(exc) != "BlockCountExceedsLimit":
                        raise
                    sequence = self._advance(sequence)
                    continue
                if int(str(result.get("blob_committed_block_count") or 0)) >= self.blocks_per_blob:
                    self._advance(sequence)
                return
        except AzureError as exc:
            raise AnchorStoreError(
                f"could not append to the audit anchor store {self.location}: {exc}"
            ) from exc

    def _current_sequence(self) -> int:
        with self._lock:
            if self._sequence is None:
                found = [number for number, _ in self._blobs()]
                self._sequence = max(found, default=0)
            return self._sequence

    def _advance(self, past: int) -> int:
        with self._lock:
            self._sequence = max(self._sequence or 0, past + 1)
            return self._sequence

    def _create(self, sequence: int) -> None:
        # Another appender may have created it first: then append to theirs.
        with suppress(ResourceExistsError, ResourceModifiedError):
            self.container.get_blob_client(self.blob_name(sequence)).create_append_blob(
                match_condition=MatchConditions.IfMissing
            )

    def _blobs(self) -> list[tuple[int, Any]]:
        """``(sequence, properties)`` of this store's blobs, in sequence order."""
        found = []
        for props in self.container.list_blobs(name_starts_with=self.prefix):
            match = _SEQUENCE.fullmatch(str(props.name)[len(self.prefix) :])
            if match is not None:
                found.append((int(match.group(1)), props))
        return sorted(found, key=lambda item: item[0])

    def _read(self) -> list[str]:
        try:
            blobs = self._blobs()
        except ResourceNotFoundError as exc:
            raise AnchorStoreError(f"the audit anchor container {self.container.url} does not exist") from exc
        except AzureError as exc:
            raise AnchorStoreError(f"could not list the audit anchor store {self.location}: {exc}") from exc
        records: list[str] = []
        for expected, (sequence, props) in enumerate(blobs):
            if sequence != expected:
                raise AnchorStoreAltered(
                    f"anchor blob {self.blob_name(expected)} is missing from {self.location} (the "
                    "blobs after it exist): anchors were removed"
                )
            if props.blob_type != BlobType.APPENDBLOB:
                raise AnchorStoreAltered(
                    f"anchor blob {props.name} is a {props.blob_type}, not an append blob: it was "
                    "rewritten (replaced) after anchors were appended to it"
                )
            try:
                content = self.container.download_blob(props.name).readall()
            except AzureError as exc:
                raise AnchorStoreError(f"could not read the audit anchor blob {props.name}: {exc}") from exc
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise AnchorStoreAltered(
                    f"anchor blob {props.name} is not UTF-8 text: it was altered"
                ) from exc
            records.extend(text.splitlines())
        return records


def _error_code(exc: HttpResponseError) -> str | None:
    """The storage service's error code (``x-ms-error-code``), e.g. ``ContainerNotFound``."""
    code = getattr(exc, "error_code", None)  # set by the storage SDK on its errors
    if code is None and exc.error is not None:
        code = exc.error.code
    return None if code is None else str(code)
