"""Checks a bot message against Teams' schema for AI message features (label, citations, feedback).

``teams_ai_message.schema.json`` is the documented shape; this adds what JSON Schema cannot
say: at most one root message entity (Teams refuses more with 400), citation positions
unique, and every ``[n]`` marker in the text matched by a citation and every citation by a
marker.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

SCHEMA_PATH = Path(__file__).with_name("teams_ai_message.schema.json")
MESSAGE_ENTITY = "https://schema.org/Message"
MARKER = re.compile(r"\[(\d+)\]")


@cache
def _validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FormatChecker())


def problems(activity: dict[str, Any]) -> list[str]:
    """Everything wrong with ``activity`` as a Teams AI message (empty when it is valid)."""
    found = [
        f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in _validator().iter_errors(activity)
    ]
    roots = [
        e for e in activity.get("entities") or [] if isinstance(e, dict) and e.get("type") == MESSAGE_ENTITY
    ]
    if len(roots) > 1:
        found.append(f"{len(roots)} root message entities (Teams allows one)")
    citations = [c for root in roots for c in root.get("citation") or []]
    positions = [c.get("position") for c in citations]
    if len(set(positions)) != len(positions):
        found.append(f"citation positions repeat: {positions}")
    markers = {int(m) for m in MARKER.findall(activity.get("text") or "")}
    if citations and markers != set(positions):
        found.append(f"markers in the text {sorted(markers)} do not match the citations {sorted(positions)}")
    return found


def ai_entity(activity: dict[str, Any]) -> dict[str, Any] | None:
    """The root message entity of ``activity``, if it has one."""
    return next(
        (
            e
            for e in activity.get("entities") or []
            if isinstance(e, dict) and e.get("type") == MESSAGE_ENTITY
        ),
        None,
    )


def assert_valid_ai_message(activity: dict[str, Any]) -> dict[str, Any]:
    """Fails unless ``activity`` is an AI-labelled message valid against the schema; returns its entity."""
    wrong = problems(activity)
    assert not wrong, (
        "not a valid Teams AI message:\n" + "\n".join(wrong) + "\n" + json.dumps(activity, indent=1)
    )
    entity = ai_entity(activity)
    assert entity is not None, "no AI message entity"
    assert entity.get("additionalType") == ["AIGeneratedContent"], "no AI label"
    return entity
