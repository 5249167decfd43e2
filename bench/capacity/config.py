"""Where the capacity model's numbers come from: a YAML file, flags, the settings, host.json.

Flags override the file, the file overrides :class:`CapacityInputs`' defaults. The
:class:`Deployment` (the bounds the code enforces) is read from :class:`Settings`, the
retention default and ``host.json``'s queue trigger settings, never restated here.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import ValidationError

from bench.capacity.model import CapacityInputs, Deployment
from copilot.errors import InvalidInput
from copilot.settings import DEFAULT_RETENTION_DAYS, PROJECT_ROOT, Settings

HOST_JSON = PROJECT_ROOT / "host.json"


def deployment(settings: Settings, host_json: Path = HOST_JSON) -> Deployment:
    """The bounds of this deployment: model-call limits and summarisation from ``settings``,
    the retention default, and the queue trigger's batch settings from ``host_json``."""
    try:
        queues = json.loads(host_json.read_text(encoding="utf-8"))["extensions"]["queues"]
        batch, threshold = int(queues["batchSize"]), int(queues["newBatchThreshold"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"cannot read the queue batch settings from {host_json}: {exc}") from exc
    return Deployment(
        model_call_run_limit=settings.model_call_run_limit,
        model_call_thread_limit=settings.model_call_thread_limit,
        summarization_trigger_tokens=settings.summarization_trigger_tokens,
        thread_idle_rotate_hours=settings.thread_idle_rotate_hours,
        retention_days=DEFAULT_RETENTION_DAYS,
        queue_batch_size=batch,
        queue_new_batch_threshold=threshold,
        db_pool_max_size=settings.db_pool_max_size,
    )


def flag(name: str) -> str:
    """The command-line flag of an input field: ``active_reps`` → ``--active-reps``."""
    return "--" + name.replace("_", "-")


def _scalar(annotation: Any) -> tuple[type, tuple[str, ...] | None]:
    """The argparse type of a field (``X | None`` → X) and its choices for a Literal."""
    if get_origin(annotation) in (types.UnionType, typing.Union):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is Literal:
        return str, tuple(str(a) for a in get_args(annotation))
    return annotation, None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`CapacityInputs` field (unset flags leave the file's or default value)."""
    group = parser.add_argument_group("inputs (override the --config file; units in each help)")
    for name, field in CapacityInputs.model_fields.items():
        kind, choices = _scalar(field.annotation)
        group.add_argument(
            flag(name),
            dest=name,
            type=kind,
            choices=choices,
            default=None,
            metavar="N" if choices is None else None,
            help=f"{field.description} (default {field.default})",
        )


def _problems(exc: ValidationError, where: str) -> str:
    parts = []
    for error in exc.errors()[:5]:
        loc = ".".join(str(p) for p in error["loc"]) or "inputs"
        parts.append(f"{loc}: {error['msg']}")
    return f"invalid capacity inputs ({where}): " + "; ".join(parts)


def read_config(path: Path) -> dict[str, Any]:
    """The YAML file's mapping of input names to values (``{}`` for an empty file)."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InvalidInput(
            f"{path} must hold a mapping of input names to values, not {type(loaded).__name__}"
        )
    return {str(k): v for k, v in loaded.items()}


def inputs(config: Path | None, overrides: Mapping[str, Any]) -> CapacityInputs:
    """The inputs: defaults, then the YAML file's values, then the flags that were given."""
    values = read_config(config) if config is not None else {}
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        # Validated together: a check across fields may hold only once the flags apply.
        return CapacityInputs.model_validate({**values, **given})
    except ValidationError as exc:
        where = " and ".join(([str(config)] if config is not None else []) + (["flags"] if given else []))
        raise InvalidInput(_problems(exc, where or "defaults")) from exc
