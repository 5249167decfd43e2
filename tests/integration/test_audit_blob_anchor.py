"""The blob anchor store against Azurite's real blob service (append blobs, conditional creates)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from azure.identity import ManagedIdentityCredential
from azure.storage.blob import BlobType, ContainerClient
from pydantic import SecretStr

from copilot.errors import AnchorStoreAltered, AnchorStoreError, AuditTamperDetected, ConfigurationError
from copilot.persistence import audit, audit_keys
from copilot.persistence.audit_anchor import default_anchor_store
from copilot.persistence.audit_blob_anchor import BlobAnchorStore
from copilot.persistence.migrations import migrate
from copilot.settings import Settings
from tests.integration.test_audit import DEPLOYED, _as_owner_without_triggers, _key_entry, make_entry
from tests.support.azurite import AzuriteBlob, run_azurite_blob

pytestmark = pytest.mark.integration

Conn = psycopg.AsyncConnection[Any]


@pytest.fixture(scope="module")
def azurite_blob() -> Iterator[AzuriteBlob]:
    with run_azurite_blob() as running:
        yield running


@pytest.fixture
def container(azurite_blob: AzuriteBlob) -> Iterator[ContainerClient]:
    """A fresh container for one test (the deployment template creates the real one)."""
    client = ContainerClient.from_connection_string(
        azurite_blob.connection_string, f"anchors-{uuid.uuid4().hex}"
    )
    client.create_container()
    try:
        yield client
    finally:
        client.delete_container()
        client.close()


def store_on(azurite_blob: AzuriteBlob, container: ContainerClient, **options: Any) -> BlobAnchorStore:
    """A store with its own client (as another process would have)."""
    return BlobAnchorStore.with_connection_string(
        azurite_blob.connection_string, container.container_name, **options
    )


@pytest.fixture
async def blob_config(
    azurite_blob: AzuriteBlob, container: ContainerClient, db_conn: Conn
) -> audit.AuditConfig:
    """The owner's connection to a migrated database, anchoring in the blob store."""
    await migrate(db_conn)
    config = audit.AuditConfig(audit_keys.parse_keys(_key_entry("k1", 1)), store_on(azurite_blob, container))
    audit.bind(db_conn, config)
    return config


async def test_records_appended_are_read_back_in_order_by_another_client(azurite_blob, container):
    writer = store_on(azurite_blob, container)
    for n in range(5):
        await writer.append(json.dumps({"n": n}))

    records = await store_on(azurite_blob, container).read()

    assert [json.loads(r)["n"] for r in records] == list(range(5))
    (blob,) = list(container.list_blobs())
    assert (blob.name, blob.blob_type) == ("anchors-000000.jsonl", BlobType.APPENDBLOB)
    assert await store_on(azurite_blob, container, prefix="other-").read() == []


async def test_a_full_blob_rolls_over_to_the_next_and_reading_spans_them(azurite_blob, container):
    store = store_on(azurite_blob, container, blocks_per_blob=2)
    for n in range(5):
        await store.append(str(n))

    assert sorted(b.name for b in container.list_blobs()) == [
        "anchors-000000.jsonl",
        "anchors-000001.jsonl",
        "anchors-000002.jsonl",
    ]
    # A new process finds the newest blob and carries on there.
    await store_on(azurite_blob, container, blocks_per_blob=2).append("5")
    assert await store.read() == ["0", "1", "2", "3", "4", "5"]


async def test_an_audit_chain_anchored_in_blobs_detects_a_removed_newest_row(db_conn, blob_config):
    ids = [await audit.append(db_conn, make_entry(n)) for n in range(1, 4)]

    intact = await audit.verify(db_conn)
    assert (intact.ok, intact.anchors_checked) == (True, 3)
    assert intact.last_anchor is not None
    assert intact.last_anchor.last_id == ids[-1]
    assert intact.anchor_store is not None
    assert intact.anchor_store.startswith("http://127.0.0.1:")

    await _as_owner_without_triggers(db_conn, f"DELETE FROM audit_log WHERE id = {ids[-1]}")
    report = await audit.verify(db_conn)

    assert (report.ok, report.truncated, report.first_bad_id) == (False, True, ids[-1])


async def test_an_anchor_rewritten_in_its_blob_is_reported_as_forged(db_conn, blob_config, container):
    ids = [await audit.append(db_conn, make_entry(n)) for n in range(1, 3)]
    blob = container.get_blob_client("anchors-000000.jsonl")
    records = blob.download_blob().readall().decode().splitlines()
    doctored = json.loads(records[-1])
    doctored["last_id"] = ids[0]  # pretend the log ended a row earlier
    doctored["rows"] = 1
    # Recreate the append blob with the doctored record (what the immutability policy forbids in Azure).
    blob.delete_blob()
    blob.create_append_blob()
    blob.append_block(("\n".join([*records[:-1], json.dumps(doctored)]) + "\n").encode())

    report = await audit.verify(db_conn)

    assert not report.ok
    assert report.problem is not None
    assert "bad signature" in report.problem


async def test_an_anchor_blob_replaced_by_a_put_blob_is_reported_as_an_altered_store(
    db_conn, blob_config, container
):
    await audit.append(db_conn, make_entry(1))
    blob = container.get_blob_client("anchors-000000.jsonl")
    content = blob.download_blob().readall()
    blob.upload_blob(content, overwrite=True)  # same bytes, but now a block blob anyone could rewrite

    report = await audit.verify(db_conn)

    assert not report.ok
    assert report.first_bad_id is None
    assert report.problem is not None
    assert "not an append blob" in report.problem
    with pytest.raises(AuditTamperDetected):
        await audit.seal_head(db_conn)


async def test_a_removed_anchor_blob_is_reported(azurite_blob, container, db_conn, blob_config):
    blob_config.anchors = store_on(azurite_blob, container, blocks_per_blob=2)
    for n in range(1, 6):
        await audit.append(db_conn, make_entry(n))
    assert (await audit.verify(db_conn)).ok
    container.delete_blob("anchors-000001.jsonl")

    report = await audit.verify(db_conn)

    assert not report.ok
    assert report.problem is not None
    assert "anchors-000001.jsonl is missing" in report.problem
    with pytest.raises(AnchorStoreAltered):
        await blob_config.anchors.read()


async def test_two_appenders_racing_on_a_fresh_store_lose_no_record(azurite_blob, container):
    # Both find no blob and create it at once: the conditional create (If-None-Match: *) must
    # not let the second wipe what the first appended; the same at each roll-over.
    stores = [store_on(azurite_blob, container, blocks_per_blob=7) for _ in range(2)]
    start = threading.Barrier(2)

    def appender(index: int) -> None:
        start.wait()
        for n in range(20):
            asyncio.run(stores[index].append(f"{index}-{n}"))

    await asyncio.gather(*(asyncio.to_thread(appender, i) for i in range(2)))

    records = await stores[0].read()
    assert sorted(records) == sorted(f"{i}-{n}" for i in range(2) for n in range(20))
    for index in range(2):  # each appender's records in its own order
        mine = [r for r in records if r.startswith(f"{index}-")]
        assert mine == [f"{index}-{n}" for n in range(20)]
    names = sorted(b.name for b in container.list_blobs())
    assert names == [f"anchors-{n:06d}.jsonl" for n in range(len(names))]
    assert len(names) >= 40 // 9, "the records rolled over several blobs"


async def test_an_appender_that_lost_the_race_to_create_the_blob_does_not_replace_it(azurite_blob, container):
    # The interleaving the racing test can only hope to hit: B found the blob missing, A then
    # created it and appended, and only now does B's create arrive.
    first, late = store_on(azurite_blob, container), store_on(azurite_blob, container)
    await first.append("a")

    late._create(0)
    await late.append("b")

    assert await first.read() == ["a", "b"]


async def test_a_missing_container_is_a_clear_store_error(azurite_blob):
    store = BlobAnchorStore.with_connection_string(azurite_blob.connection_string, "no-such-container")

    with pytest.raises(AnchorStoreError, match="does not exist"):
        await store.append("{}")
    with pytest.raises(AnchorStoreError, match="does not exist"):
        await store.read()


async def test_the_settings_select_the_blob_store(azurite_blob, container, tmp_path: Path):
    settings = Settings(
        COPILOT_DATA_DIR=tmp_path,
        COPILOT_AUDIT_ANCHOR_STORE="blob",
        COPILOT_AUDIT_ANCHOR_CONNECTION=SecretStr(azurite_blob.connection_string),
        COPILOT_AUDIT_ANCHOR_CONTAINER=container.container_name,
    )

    store = default_anchor_store(settings)
    await store.append("{}")

    assert isinstance(store, BlobAnchorStore)
    assert await store.read() == ["{}"]
    assert not (tmp_path / "audit").exists(), "no local anchor file"


def test_a_deployment_signs_in_to_the_blob_store_with_its_managed_identity(tmp_path: Path):
    keys = SecretStr(_key_entry("k1", 1))
    settings = Settings(
        COPILOT_DATA_DIR=tmp_path,
        **DEPLOYED,
        COPILOT_AUDIT_HMAC_KEYS=keys,
        COPILOT_AUDIT_ANCHOR_STORE="blob",
        COPILOT_AUDIT_ANCHOR_ACCOUNT_URL="https://contosoaudit.blob.core.windows.net",
        COPILOT_AUDIT_ANCHOR_CLIENT_ID="6a1e3f0c-0000-4000-8000-000000000001",
    )

    store = audit.audit_config(settings).anchors

    assert isinstance(store, BlobAnchorStore)
    assert store.location == "https://contosoaudit.blob.core.windows.net/audit-anchors/anchors-*.jsonl"
    assert isinstance(store.container.credential, ManagedIdentityCredential)


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({}, "needs COPILOT_AUDIT_ANCHOR_ACCOUNT_URL"),
        ({"COPILOT_AUDIT_ANCHOR_CONNECTION": SecretStr("UseDevelopmentStorage=true")}, "Azurite"),
    ],
)
def test_a_deployment_with_an_incomplete_or_key_based_blob_store_refuses_to_start(
    tmp_path: Path, extra: dict[str, Any], problem: str
):
    settings = Settings(
        COPILOT_DATA_DIR=tmp_path,
        **DEPLOYED,
        COPILOT_AUDIT_HMAC_KEYS=SecretStr(_key_entry("k1", 1)),
        COPILOT_AUDIT_ANCHOR_STORE="blob",
        **extra,
    )
    with pytest.raises(ConfigurationError, match=problem):
        audit.audit_config(settings)
