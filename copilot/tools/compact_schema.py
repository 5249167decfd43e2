"""Tool argument schemas as the model is sent them: what it needs, nothing more (pure).

Pydantic writes an optional field as ``anyOf: [<type>, {"type": "null"}]`` with
``default: null`` and a ``title`` per field. A model needs none of that to fill a call
(an optional field is simply not required), and every tool's schema is sent with every
model call, so it is sent compact: the null branch, null defaults and titles are dropped.
Validation is unchanged: the write guard validates against the full Pydantic schema.
"""

from __future__ import annotations

from typing import Any

_NULL = {"type": "null"}


def compact_json_schema(schema: Any) -> Any:
    """``schema`` without null branches, null defaults and titles (recursively)."""
    if isinstance(schema, list):
        return [compact_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    branches = schema.get("anyOf")
    if isinstance(branches, list) and _NULL in branches:
        rest = [b for b in branches if b != _NULL]
        if len(rest) == 1 and isinstance(rest[0], dict):
            merged = {k: v for k, v in schema.items() if k != "anyOf"}
            merged.update(rest[0])
            return compact_json_schema(merged)
    return {
        key: compact_json_schema(value)
        for key, value in schema.items()
        if key != "title" and not (key == "default" and value is None)
    }
