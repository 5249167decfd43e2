"""Which values a Bicep file's loops and conditions depend on, and whether ARM knows them when
the deployment starts (the rule behind the compiler's BCP177, BCP178 and BCP182).

The compiler cannot be installed here, so this is the project's own check of that rule, on
pycep's JSON of each file. A value is known at the start of a deployment when it is built only
from:

* parameters, and variables built only from known values;
* literals, and functions of known values (``resourceId()``, ``uniqueString()``,
  ``resourceGroup()``, ``environment()``, ``concat()``, ``range()``, …), except the runtime
  ones (``reference()``, ``list*()``);
* a resource's ``id``, ``name``, ``type`` or ``apiVersion`` (when its name is known), and a
  module's ``name``;
* the item and index of an enclosing loop (whose array is itself checked).

Anything else (a module's ``outputs``, a resource's ``properties``) is computed by ARM during
the deployment, and :func:`violations` lists where a ``for`` array or an ``if`` condition uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.infra.bicep import parse

START_PROPERTIES = {"id", "name", "type", "apiVersion"}
"""The properties of a resource declared in the file that ARM knows before it deploys anything."""

RUNTIME_FUNCTIONS = re.compile(r"^(reference|list.*)$", re.IGNORECASE)
"""Functions evaluated while resources deploy (their results come from the resources)."""

_REFERENCE = re.compile(r"(?<![\w.'])([A-Za-z_]\w*)((?:\s*(?:\.\s*[A-Za-z_]\w*|\[[^\]]*\]))*)")
"""An identifier and its accessor chain inside a ``${...}`` interpolation."""


@dataclass
class StartRule:
    """One Bicep file's symbols, and the check of an expression against the start rule."""

    doc: dict[str, Any]
    _known_vars: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, path: Path) -> StartRule:
        return cls(parse(path))

    # --- symbols -----------------------------------------------------------------------------

    @property
    def params(self) -> set[str]:
        return set(self.doc.get("parameters", {}))

    @property
    def variables(self) -> dict[str, Any]:
        return dict(self.doc.get("variables", {}))

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.doc.get("resources", {}))

    @property
    def modules(self) -> dict[str, Any]:
        return dict(self.doc.get("modules", {}))

    # --- the rule ----------------------------------------------------------------------------

    def runtime_uses(self, node: Any, bound: frozenset[str] = frozenset()) -> list[str]:
        """What in ``node`` ARM only knows during the deployment (empty: known at its start).

        ``bound`` holds the loop items and indexes in scope.
        """
        if node is None or isinstance(node, bool | int | float):
            return []
        if isinstance(node, str):
            return self._name_or_literal(node, bound)
        if isinstance(node, list):
            return [use for item in node for use in self.runtime_uses(item, bound)]
        if isinstance(node, dict) and set(node) == {"operator"}:
            return self._operator(node["operator"], bound)
        if isinstance(node, dict) and set(node) == {"function"}:
            fn = node["function"]
            if RUNTIME_FUNCTIONS.match(fn["type"]):
                return [f"{fn['type']}()"]
            return self.runtime_uses(list((fn.get("parameters") or {}).values()), bound)
        if isinstance(node, dict) and "loop_type" in node:
            detail = node["loop_type"]["detail"]
            inner = bound | {detail["item_name"], detail.get("index_name") or detail["item_name"]}
            uses = self.runtime_uses(detail["array_name"], bound)
            return uses + self.runtime_uses(node.get("config"), inner)
        if isinstance(node, dict):
            return self.runtime_uses(list(node.values()), bound)
        return [repr(node)]

    def _name_or_literal(self, text: str, bound: frozenset[str]) -> list[str]:
        if text in bound or text in self.params:
            return []
        if text in self.variables:
            return self._variable(text)
        # pycep writes a bare symbol and a string literal alike; a whole resource or module is
        # no loop array or condition, so such a string is a literal ('vault' as a groupId).
        uses: list[str] = []
        for inner in re.findall(r"\$\{([^}]*)\}", text):
            for root, accessors in _REFERENCE.findall(inner):
                path = [part for part in re.split(r"\s*\.\s*|\[[^\]]*\]", accessors) if part]
                uses += self._access(root, path, bound)
        return uses

    def _variable(self, name: str) -> list[str]:
        if name not in self._known_vars:
            self._known_vars[name] = []  # a cycle is the compiler's error, not this rule's
            inner = self.runtime_uses(self.variables[name]["value"])
            self._known_vars[name] = [f"{name} ← {use}" for use in inner]
        return self._known_vars[name]

    def _access(self, root: str, path: list[str], bound: frozenset[str]) -> list[str]:
        """``root.path…``: a symbol with its accessors (``storage.outputs.id``)."""
        dotted = ".".join([root, *path])
        if root in self.modules:
            return [] if path[:1] == ["name"] else [dotted]
        if root in self.resources:
            if path[:1] and path[0] in START_PROPERTIES:
                name = self.resources[root]["config"]
                while isinstance(name, dict) and "config" in name and "name" not in name:
                    name = name["config"]
                return [f"{dotted} ← {use}" for use in self.runtime_uses(name.get("name"), bound)]
            return [dotted]
        if root in bound or root in self.params or root in self.variables:
            return self._name_or_literal(root, bound)
        return []  # a function's result (resourceGroup().location) or a literal word

    def _operator(self, op: dict[str, Any], bound: frozenset[str]) -> list[str]:
        operands = op.get("operands") or {}
        if op["type"] == "property_accessor":
            root, path, indexes = _flatten(op)
            uses = self.runtime_uses(indexes, bound)
            if isinstance(root, str):
                return uses + self._access(root, path, bound)
            return uses + self.runtime_uses(root, bound)
        if op["type"] == "index_accessor":
            base, index = operands["operand_1"], operands["operand_2"]
            return self.runtime_uses(index, bound) + self.runtime_uses(base, bound)
        return self.runtime_uses(list(operands.values()), bound)

    def violations(self) -> list[str]:
        """Every ``for`` array and ``if`` condition of the file that uses a runtime value."""
        found: list[str] = []
        for kind in ("resources", "modules", "variables", "outputs"):
            for name, spec in self.doc.get(kind, {}).items():
                found += [f"{kind[:-1]} {name}: {use}" for use in self._statement(spec)]
        return found

    def _statement(self, node: Any, bound: frozenset[str] = frozenset()) -> list[str]:
        """The runtime uses in the loops and conditions anywhere inside ``node``."""
        if isinstance(node, list):
            return [use for item in node for use in self._statement(item, bound)]
        if not isinstance(node, dict):
            return []
        found: list[str] = []
        if "loop_type" in node:
            detail = node["loop_type"]["detail"]
            found += [
                f"for {detail['item_name']}: {u}" for u in self.runtime_uses(detail["array_name"], bound)
            ]
            bound = bound | {detail["item_name"], detail.get("index_name") or detail["item_name"]}
        if "config" in node and node.get("condition") is not None:
            found += [f"if: {use}" for use in self.runtime_uses(node["condition"], bound)]
        for key, value in node.items():
            if key not in ("loop_type", "condition"):
                found += self._statement(value, bound)
        return found


def _flatten(op: dict[str, Any]) -> tuple[Any, list[str], list[Any]]:
    """``a.b.c`` as pycep nests it (``a`` then ``b.c``) → (``a``, ``["b", "c"]``, indexes).

    ``dns[i].id`` gives ``dns`` as the root and ``[i]`` as the indexes to check.
    """
    operands = op["operands"]
    root, rest = operands["operand_1"], operands["operand_2"]
    path: list[str] = []
    while isinstance(rest, dict) and rest.get("operator", {}).get("type") == "property_accessor":
        inner = rest["operator"]["operands"]
        path.append(str(inner["operand_1"]))
        rest = inner["operand_2"]
    path.append(str(rest) if not isinstance(rest, dict) else "?")
    indexes: list[Any] = []
    while isinstance(root, dict) and root.get("operator", {}).get("type") == "index_accessor":
        indexes.append(root["operator"]["operands"]["operand_2"])
        root = root["operator"]["operands"]["operand_1"]
    return root, path, indexes
