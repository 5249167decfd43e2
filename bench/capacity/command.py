"""The ``capacity`` command: read the inputs, estimate, print; calibrate against a bench run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.capacity import config
from bench.capacity.calibrate import Check, calibrate
from bench.capacity.model import estimate
from bench.capacity.render import calibration_text, to_json, to_text
from copilot.errors import InvalidInput
from copilot.settings import Settings


def _bench_document(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise InvalidInput(
            f"{path} is not JSON (expected `python -m bench run --json` output): {exc}"
        ) from exc
    if not isinstance(doc, dict):
        raise InvalidInput(f"{path} is not a `python -m bench run --json` document")
    return doc


def main(
    settings: Settings,
    *,
    config_file: str | None,
    overrides: Mapping[str, Any],
    calibrate_file: str | None,
    as_json: bool,
) -> int:
    """Print the estimate (and with ``calibrate_file`` the calibration); exit 0.

    Bad input (an unreadable file, an invalid value) raises :class:`InvalidInput`.
    """
    inputs = config.inputs(Path(config_file) if config_file else None, overrides)
    report = estimate(inputs, config.deployment(settings))
    checks: list[Check] | None = None
    if calibrate_file is not None:
        checks = calibrate(inputs, _bench_document(Path(calibrate_file)))
    if as_json:
        print(json.dumps(to_json(report, checks), indent=2))
        return 0
    print(to_text(report))
    if checks is not None:
        print()
        print(f"calibration against {calibrate_file}:")
        print(calibration_text(checks))
    return 0
