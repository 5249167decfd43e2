"""host.json's queue settings, read once for every stand-in of the Functions host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.host_json import QueueOptions, parse_timespan


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:00:02", 2.0), ("00:00:00.500", 0.5), ("00:10:00", 600.0), ("1.02:00:30", 93630.0)],
)
def test_a_dotnet_timespan_reads_as_seconds(text: str, seconds: float):
    assert parse_timespan(text) == seconds


def test_the_projects_host_json_lets_one_instance_run_its_batch_plus_threshold(tmp_path: Path):
    options = QueueOptions.from_host_json()
    queues = json.loads(Path("host.json").read_text())["extensions"]["queues"]
    assert options.most_at_once == queues["batchSize"] + queues["newBatchThreshold"]
    assert options.max_polling_interval == parse_timespan(queues["maxPollingInterval"])


def test_unset_queue_settings_take_the_functions_hosts_defaults(tmp_path: Path):
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"version": "2.0", "extensions": {"queues": {"batchSize": 4}}}))
    options = QueueOptions.from_host_json(path)
    assert (options.batch_size, options.new_batch_threshold, options.most_at_once) == (4, 2, 6)
    assert options.max_dequeue_count == 5
    assert options.max_polling_interval == 60.0
    assert options.message_encoding == "base64"
