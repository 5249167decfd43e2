"""Test helpers for Adaptive Cards: the official JS validator, a tree walk, a Teams-like submit."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = Path(__file__).with_name("validate_card.mjs")


def validate_cards(cards: list[dict[str, Any]]) -> list[dict[str, list[dict[str, str]]]]:
    """``{"errors": [...], "warnings": [...]}`` per card, from the ``adaptivecards`` npm package.

    One Node process for the whole batch.
    """
    node = shutil.which("node")
    assert node is not None, "Node 20 must be on PATH (see README)"
    assert (ROOT / "node_modules" / "adaptivecards").is_dir(), "run `npm ci` (make test does)"
    done = subprocess.run(
        [node, str(VALIDATOR)],
        input=json.dumps(cards),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, list[dict[str, str]]]] = json.loads(done.stdout)
    assert len(results) == len(cards)
    return results


def walk(node: Any, *, depth: int = 0) -> Iterator[tuple[dict[str, Any], int]]:
    """Every typed object (card, element, action) in a card, with its card nesting depth.

    Descends into ``body``, ``items``, ``columns``, ``actions``, ``selectAction``,
    ``inlineAction`` and ``Action.ShowCard`` cards (depth + 1); never into ``data``.
    """
    if isinstance(node, list):
        for item in node:
            yield from walk(item, depth=depth)
        return
    if not isinstance(node, dict):
        return
    if "type" in node:
        yield node, depth
    for key, value in node.items():
        if key in ("data", "msteams", "choices", "facts"):
            continue
        if key == "card":
            yield from walk(value, depth=depth + 1)
        elif isinstance(value, dict | list):
            yield from walk(value, depth=depth)


def elements(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every element and action in ``card`` (nested cards included), not the cards themselves."""
    return [node for node, _ in walk(card) if node["type"] != "AdaptiveCard"]


def inputs(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``Input.*`` element in ``card``, nested cards included."""
    return [node for node in elements(card) if str(node["type"]).startswith("Input.")]


def submit_actions(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``Action.Submit`` in ``card``, nested cards included."""
    return [node for node in elements(card) if node["type"] == "Action.Submit"]


def all_text(card: dict[str, Any]) -> str:
    """The visible text of a card: text blocks, facts, titles, labels (newline-joined)."""
    parts: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                collect(item)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "data":
                    continue
                if key in ("text", "title", "value", "label", "placeholder") and isinstance(value, str):
                    parts.append(value)
                else:
                    collect(value)

    collect(card)
    return "\n".join(parts)


def _input_value(element: dict[str, Any]) -> str | None:
    value = element.get("value")
    if element["type"] == "Input.Toggle":
        return str(value if value is not None else element.get("valueOff", "false"))
    if value is None or value == "":
        return None  # Teams leaves unset inputs out of the submit
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def teams_submit(card: dict[str, Any], action: str, changes: dict[str, str] | None = None) -> dict[str, Any]:
    """What Teams sends as ``activity.value`` when the rep presses a decision button.

    Finds the ``Action.Submit`` whose data has ``action``; collects, as strings, the
    values of the inputs on the card holding it (the prefilled values, then the rep's
    ``changes``); returns ``{**data, **inputs}`` as Teams merges them.
    """

    def find(node: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        for act in node.get("actions", []):
            if act["type"] == "Action.Submit" and act.get("data", {}).get("action") == action:
                return node, act
            if act["type"] == "Action.ShowCard":
                found = find(act["card"])
                if found:
                    return found
        return None

    found = find(card)
    assert found is not None, f"no {action} button on the card"
    holder, act = found
    values: dict[str, Any] = {}
    for element in walk(holder.get("body", [])):
        node = element[0]
        if str(node["type"]).startswith("Input."):
            value = _input_value(node)
            if value is not None:
                values[node["id"]] = value
    values.update(changes or {})
    return {**act["data"], **values}


def element_ids(card: dict[str, Any]) -> list[str]:
    """The ``id`` of every element in a card (ShowCards included): where cards keep what a
    rep does not read, e.g. the proposal a card is about (``bot.cards.card_element_id``)."""
    return [str(node["id"]) for node, _ in walk(card) if "id" in node]
