"""The Bicep template as data: every ``infra/*.bicep`` file parsed with pycep, and a small
evaluator that computes what a property is for given parameter values.

pycep gives each file as JSON: ``parameters``, ``variables``, ``resources``, ``modules`` and
``outputs``, with expressions as ``{"operator": ...}`` / ``{"function": ...}`` nodes. It writes an
identifier and a string literal the same way (both are plain strings), so the evaluator treats a
string as a reference when it is exactly the name of a parameter or variable of that file (no
string literal in the template is one: ``test_no_string_literal_is_also_a_name`` in
``test_template_policy.py`` keeps it so). Anything it cannot know offline (a resource's runtime
property, ``uniqueString``, ``tenant()``) evaluates to :data:`UNKNOWN`; an interpolated string
keeps its unknown parts as ``${...}`` text.

The evaluator is for the policy and consistency tests; the real Bicep compiler is not
installable here, so nothing in this file claims a deployment would compile.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pycep import BicepParser

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MAIN = INFRA / "main.bicep"
EXAMPLE_PARAMETERS = INFRA / "main.parameters.example.json"


class _Unknown:
    """A value only Azure knows at deployment time."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()

_INTERPOLATION = re.compile(r"\$\{([^}]*)\}")


def bicep_files() -> list[Path]:
    """Every Bicep file of the template."""
    return sorted(INFRA.rglob("*.bicep"))


@cache
def parse(path: Path) -> dict[str, Any]:
    """One file as pycep's JSON (cached: the files do not change during a run)."""
    parsed = BicepParser().parse(file_path=path)
    return dict(parsed)


def example_parameters() -> dict[str, Any]:
    """The example parameters file's values (a Key Vault ``reference`` is :data:`UNKNOWN`)."""
    document = json.loads(EXAMPLE_PARAMETERS.read_text())
    return {name: spec.get("value", UNKNOWN) for name, spec in document["parameters"].items()}


def body(config: dict[str, Any]) -> dict[str, Any]:
    """A resource's or module's properties, unwrapped from ``if (...)`` / ``[for ...]``."""
    while (
        isinstance(config, dict) and "config" in config and ("condition" in config or "loop_type" in config)
    ):
        config = config["config"]
    return config


def condition(config: dict[str, Any]) -> Any:
    """The ``if (...)`` node of a conditional resource or module, else ``None``."""
    return config.get("condition") if "config" in config else None


@dataclass
class Scope:
    """One file evaluated with bound parameter values."""

    path: Path
    params: dict[str, Any]
    doc: dict[str, Any] = field(init=False)
    _vars: dict[str, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.doc = parse(self.path)
        for name, spec in self.doc.get("parameters", {}).items():
            if name not in self.params:
                default = spec.get("default")
                self.params[name] = UNKNOWN if default is None else self.eval(default)

    # --- the template's declarations ---------------------------------------------------------

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        """This file's resources of one type (``Microsoft.X/y``), by symbolic name, unwrapped."""
        return {
            name: body(spec["config"])
            for name, spec in self.doc.get("resources", {}).items()
            if spec["type"] == type_
        }

    def resource_specs(self) -> dict[str, dict[str, Any]]:
        return dict(self.doc.get("resources", {}))

    def module(self, name: str) -> Scope:
        """A module of this file, with its parameters bound to what this file passes."""
        spec = self.doc["modules"][name]
        target = (self.path.parent / spec["detail"]["path"]).resolve()
        passed = body(spec["config"]).get("params", {})
        return Scope(target, {key: self.eval(value) for key, value in passed.items()})

    def module_paths(self) -> dict[str, Path]:
        return {
            name: (self.path.parent / spec["detail"]["path"]).resolve()
            for name, spec in self.doc.get("modules", {}).items()
        }

    # --- evaluation ----------------------------------------------------------------------------

    def names(self) -> set[str]:
        return set(self.doc.get("parameters", {})) | set(self.doc.get("variables", {}))

    def var(self, name: str) -> Any:
        if name not in self._vars:
            self._vars[name] = UNKNOWN  # a cycle evaluates to UNKNOWN rather than recursing
            self._vars[name] = self.eval(self.doc["variables"][name]["value"])
        return self._vars[name]

    def eval(self, node: Any) -> Any:
        """What ``node`` evaluates to with this scope's parameters (or :data:`UNKNOWN`)."""
        if isinstance(node, bool) or node is None or isinstance(node, int | float):
            return node
        if isinstance(node, str):
            if node in self.params:
                return self.params[node]
            if node in self.doc.get("variables", {}):
                return self.var(node)
            return self._interpolate(node)
        if isinstance(node, list):
            return [self.eval(item) for item in node]
        if isinstance(node, dict) and set(node) == {"operator"}:
            return self._operator(node["operator"])
        if isinstance(node, dict) and set(node) == {"function"}:
            return self._function(node["function"])
        if isinstance(node, dict):
            return {key: self.eval(value) for key, value in node.items()}
        return UNKNOWN

    def _interpolate(self, text: str) -> Any:
        def replace(match: re.Match[str]) -> str:
            inner = match.group(1).strip()
            value = self.eval(inner) if inner in self.names() else UNKNOWN
            return (
                str(value) if isinstance(value, str | int) and not isinstance(value, bool) else match.group(0)
            )

        return _INTERPOLATION.sub(replace, text).replace("\\'", "'")

    def _operator(self, op: dict[str, Any]) -> Any:
        kind, operands = op["type"], op.get("operands", {})
        if kind == "conditional":
            test = self.eval(operands["condition"])
            if test is UNKNOWN:
                return UNKNOWN
            return self.eval(operands["true_value"] if test else operands["false_value"])
        if kind in ("or", "and"):
            left, right = self.eval(operands["operand_1"]), self.eval(operands["operand_2"])
            if kind == "or":
                if left is True or right is True:
                    return True
                return UNKNOWN if UNKNOWN in (left, right) else bool(left or right)
            if left is False or right is False:
                return False
            return UNKNOWN if UNKNOWN in (left, right) else bool(left and right)
        if kind == "not":
            value = self.eval(operands["bool_value"])
            return UNKNOWN if value is UNKNOWN else not value
        if kind == "property_accessor":
            return self._property(operands)
        if kind == "index_accessor":
            base, index = self.eval(operands["operand_1"]), self.eval(operands["operand_2"])
            if UNKNOWN in (base, index):
                return UNKNOWN
            return base[index]
        if kind in _ARITHMETIC:
            left, right = self.eval(operands["operand_1"]), self.eval(operands["operand_2"])
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)):
                return UNKNOWN
            return _ARITHMETIC[kind](left, right)
        if kind in ("equals", "not_equals"):
            left, right = self.eval(operands["operand_1"]), self.eval(operands["operand_2"])
            if UNKNOWN in (left, right):
                return UNKNOWN
            return (left == right) if kind == "equals" else (left != right)
        return UNKNOWN

    def _property(self, operands: dict[str, Any]) -> Any:
        """``a.b.c``: a key path into an object this scope knows (a variable's, a parameter's)."""
        root, rest = self.eval(operands["operand_1"]), operands["operand_2"]
        keys: list[Any] = []
        while isinstance(rest, dict) and rest.get("operator", {}).get("type") == "property_accessor":
            keys.append(rest["operator"]["operands"]["operand_1"])
            rest = rest["operator"]["operands"]["operand_2"]
        keys.append(rest)
        for key in keys:
            if not isinstance(root, dict) or not isinstance(key, str) or key not in root:
                return UNKNOWN
            root = root[key]
        return root

    def _function(self, fn: dict[str, Any]) -> Any:
        kind = fn["type"]
        args = [self.eval(value) for value in (fn.get("parameters") or {}).values()]
        if any(arg is UNKNOWN for arg in args):
            return UNKNOWN
        if kind == "empty":
            return len(args[0]) == 0
        if kind == "concat" and all(isinstance(arg, list) for arg in args):
            return [item for arg in args for item in arg]
        if kind == "union" and all(isinstance(arg, dict) for arg in args):
            merged: dict[str, Any] = {}
            for arg in args:
                merged.update(arg)
            return merged
        if kind in ("min", "max") and all(isinstance(arg, int) for arg in args):
            return min(args) if kind == "min" else max(args)
        if kind == "string":
            return str(args[0]).lower() if isinstance(args[0], bool) else str(args[0])
        return UNKNOWN


def _divide(left: int, right: int) -> int:
    """Bicep's integer division truncates toward zero."""
    return int(left / right)


_ARITHMETIC: dict[str, Any] = {
    "add": lambda a, b: a + b,
    "substract": lambda a, b: a - b,  # pycep's spelling
    "multiply": lambda a, b: a * b,
    "divide": _divide,
    "greater_than": lambda a, b: a > b,
    "greater_than_or_equals": lambda a, b: a >= b,
    "less_than": lambda a, b: a < b,
    "less_than_or_equals": lambda a, b: a <= b,
}


def main_scope(**overrides: Any) -> Scope:
    """``main.bicep`` with the example parameters file's values, its defaults, and ``overrides``."""
    return Scope(MAIN, {**example_parameters(), **overrides})


def app_settings(scope: Scope | None = None) -> dict[str, Any]:
    """The Function App's app settings (name → evaluated value) under ``main`` ``scope``."""
    app = (scope or main_scope()).module("functionApp")
    (site,) = app.resources("Microsoft.Web/sites").values()
    settings = app.eval(site["properties"]["siteConfig"]["appSettings"])
    assert isinstance(settings, list), f"appSettings did not evaluate to a list: {settings!r}"
    names = [entry["name"] for entry in settings]
    assert len(names) == len(set(names)), f"an app setting is set twice: {sorted(names)}"
    return {entry["name"]: entry["value"] for entry in settings}


def every_setting_name() -> set[str]:
    """The names of app settings under any switch combination (OpenAI and tracing on)."""
    return set(app_settings(main_scope(deployOpenAi=True, langsmithTracing=True)))
