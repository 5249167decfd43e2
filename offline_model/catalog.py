"""The tools bound to the offline model, and which of them serves each role.

``bind_tools`` turns every tool (a LangChain ``BaseTool``, a JSON schema, a Pydantic
class) into a :class:`BoundTool`: its name, description, argument schema and whether it
is read-only. Only a tool annotated ``readOnlyHint: True`` (MCP tool annotations, which
langchain-mcp-adapters puts into ``BaseTool.metadata``) counts as a read; anything else
may change data and is only ever proposed for a write the rep asked for.

``create_agent`` binds the same tools before every model call: each tool's description
and each bound list's catalog are worked out once and kept (:mod:`memo`), for as long as
the same objects are bound unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from offline_model.memo import IdentityCache
from offline_model.roles import ROLES, SUBJECT_WORDS, Role, RoleSpec

_WORD_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


@dataclass(frozen=True)
class BoundTool:
    """One bound tool as the offline model sees it (JSON-ready, so it can travel in ``bind`` kwargs)."""

    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool
    title: str = ""

    @property
    def properties(self) -> dict[str, Any]:
        """Argument name → JSON schema."""
        props = self.parameters.get("properties")
        return props if isinstance(props, dict) else {}

    @property
    def required(self) -> set[str]:
        """Names of the required arguments."""
        required = self.parameters.get("required")
        return {str(r) for r in required} if isinstance(required, list) else set()

    def as_dict(self) -> dict[str, Any]:
        """The JSON form bound into the model's call kwargs."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "read_only": self.read_only,
            "title": self.title,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BoundTool:
        """The inverse of :meth:`as_dict` (tolerates missing keys, and OpenAI's ``{"function": …}`` form)."""
        function = data.get("function")
        if isinstance(function, Mapping):
            data = function
        params = data.get("parameters")
        return cls(
            name=str(data.get("name", "")),
            description=str(data.get("description") or ""),
            parameters=params if isinstance(params, dict) else {},
            read_only=data.get("read_only") is True,
            title=str(data.get("title") or ""),
        )


def describe_tool(tool: object) -> BoundTool:
    """A bound tool's name, schema and annotations, whatever form it was bound in."""
    function = convert_to_openai_tool(tool)["function"]  # type: ignore[arg-type]
    annotations: Mapping[str, Any] = {}
    if isinstance(tool, BaseTool):
        annotations = tool.metadata or {}
    elif isinstance(tool, Mapping):
        found = tool.get("annotations") or tool.get("metadata") or {}
        annotations = found if isinstance(found, Mapping) else {}
    params = function.get("parameters")
    if isinstance(tool, BaseTool) and isinstance(params, dict):
        params = _with_field_titles(tool, params)
    title = annotations.get("title")
    return BoundTool(
        name=str(function["name"]),
        description=str(function.get("description") or ""),
        parameters=params if isinstance(params, dict) else {},
        # Only an explicit read-only annotation makes a read: unknown means "may write".
        read_only=annotations.get("readOnlyHint") is True,
        title=title if isinstance(title, str) else "",
    )


_DESCRIBED: IdentityCache[dict[str, Any]] = IdentityCache(size=512)


def described(tool: object) -> dict[str, Any]:
    """``describe_tool(tool).as_dict()``, worked out once per tool object while it is unchanged.

    Callers must not change the dict: the same one is handed out for every binding.
    """
    return _DESCRIBED.get((tool,), _described_from(tool), lambda: describe_tool(tool).as_dict())


def _described_from(tool: object) -> object:
    """Everything :func:`describe_tool` reads from ``tool`` that could change in place
    (a Pydantic schema class or a function is taken as fixed)."""
    if isinstance(tool, BaseTool):
        # Of its metadata only the annotations read (not all of it: it may hold anything).
        meta = tool.metadata or {}
        annotations = (meta.get("readOnlyHint"), meta.get("title"))
        return (type(tool), tool.name, tool.description, tool.args_schema, annotations)
    if isinstance(tool, Mapping):
        return tool
    return None


def _with_field_titles(tool: BaseTool, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with each argument's ``title`` (its label) put back where the tool has one.

    LangChain drops titles when it converts a Pydantic schema for a provider; a JSON
    schema (an MCP tool's) keeps whatever titles the server gave.
    """
    schema = tool.args_schema
    fields = getattr(schema, "model_fields", None)
    props = params.get("properties")
    if not isinstance(fields, dict) or not isinstance(props, dict):
        return params
    titled = {
        name: {**prop, "title": fields[name].title}
        if isinstance(prop, dict) and name in fields and fields[name].title
        else prop
        for name, prop in props.items()
    }
    return {**params, "properties": titled}


FUNCTION_WORDS = frozenset(
    {"a", "an", "the", "to", "for", "of", "on", "in", "into", "at", "by", "with", "and", "or", "your", "my"}
)
"""Words that carry no meaning of their own in a tool's title ("Log an activity")."""


def words(text: str) -> set[str]:
    """Lower-case words of a tool name or description (``crmLogActivity`` → crm, log, activity)."""
    return {w.lower() for w in _WORD_RE.findall(text)}


def _mentions(found: Iterable[str], stems: tuple[str, ...]) -> bool:
    return any(w.startswith(stems) for w in found)


@dataclass(frozen=True)
class ToolTraits:
    """What :func:`score` looks at in one tool, read once for all roles."""

    properties: frozenset[str]
    required: frozenset[str]
    named: frozenset[str]
    """Words of its name and title."""
    described: frozenset[str]
    """Words of its description."""
    name_subjects: tuple[tuple[str, ...], ...]
    """The groups of :data:`SUBJECT_WORDS` its name or title speaks of."""

    @classmethod
    def of(cls, tool: BoundTool) -> ToolTraits:
        """The traits of ``tool``."""
        named = frozenset(words(tool.name) | words(tool.title))
        return cls(
            properties=frozenset(tool.properties),
            required=frozenset(tool.required),
            named=named,
            described=frozenset(words(tool.description)),
            name_subjects=tuple(group for group in SUBJECT_WORDS if _mentions(named, group)),
        )


def score(tool: BoundTool, spec: RoleSpec, traits: ToolTraits | None = None) -> int | None:
    """How well ``tool`` fits the role (higher is better), or ``None`` if it cannot serve it.

    ``traits`` are ``ToolTraits.of(tool)`` when the caller already has them.
    """
    if tool.read_only != spec.read_only:
        return None
    t = traits or ToolTraits.of(tool)
    props = t.properties
    if not spec.needs <= props or (spec.needs_any and not spec.needs_any & props):
        return None
    if spec.excludes & props:
        return None
    if spec.single_record and not t.required <= spec.needs:
        return None
    if spec.no_required and t.required:
        return None
    own_name = _mentions(t.named, spec.topics)
    other_name = any(group != spec.topics for group in t.name_subjects)
    points = 3 * own_name + _mentions(t.described, spec.topics)
    if other_name and not own_name:
        points -= 3
    return points if points > 0 else None


_CATALOGS: IdentityCache[ToolCatalog] = IdentityCache(size=64)


class ToolCatalog:
    """The bound tools, with the best one for each role found once."""

    def __init__(self, tools: Sequence[BoundTool]):
        self.tools: dict[str, BoundTool] = {t.name: t for t in tools if t.name}
        self._by_role: dict[Role, BoundTool] = {}
        traits = [(t, ToolTraits.of(t)) for t in self.tools.values()]
        for role, spec in ROLES.items():
            scored = [(s, -i, t) for i, (t, tt) in enumerate(traits) if (s := score(t, spec, tt)) is not None]
            if scored:
                self._by_role[role] = max(scored, key=lambda entry: (entry[0], entry[1]))[2]

    @classmethod
    def from_kwargs(cls, bound: object) -> ToolCatalog:
        """The catalog from the ``tools`` kwarg ``bind_tools`` bound (JSON dicts).

        Kept per bound list while its dicts are the same objects, unchanged (every model
        call of a run brings back the same ones); a catalog is never changed once built.
        """
        items = tuple(bound) if isinstance(bound, list | tuple) else ()
        return _CATALOGS.get(
            (cls, *items),
            items,
            lambda: cls([BoundTool.from_dict(item) for item in items if isinstance(item, Mapping)]),
        )

    def __bool__(self) -> bool:
        return bool(self.tools)

    def has(self, role: Role) -> bool:
        """Whether some bound tool serves ``role``."""
        return role in self._by_role

    def name(self, role: Role) -> str | None:
        """The name of the tool serving ``role``."""
        tool = self._by_role.get(role)
        return tool.name if tool else None

    def roles_of(self, name: str) -> list[Role]:
        """The roles the tool called ``name`` serves."""
        return [role for role, tool in self._by_role.items() if tool.name == name]

    def parameters(self, name: str) -> dict[str, Any] | None:
        """The argument schema of the tool called ``name``, if it is bound."""
        tool = self.tools.get(name)
        return tool.parameters if tool else None

    def label(self, name: str) -> str:
        """How a rep reads the argument or field ``name``: a bound tool's title for it, else
        the name in words."""
        for tool in self.tools.values():
            prop = tool.properties.get(name)
            if isinstance(prop, dict) and isinstance(prop.get("title"), str) and prop["title"]:
                return str(prop["title"])
        return name.replace("_", " ")

    def with_roles(self, served: Mapping[Role, BoundTool]) -> ToolCatalog:
        """A copy with ``served`` tools added, each serving its role (a role a bound tool
        already serves keeps it): the stand-ins of a SQL read surface (:mod:`offline_model.sql`)."""
        extended = ToolCatalog([])
        extended.tools = {**self.tools, **{t.name: t for t in served.values()}}
        extended._by_role = {**served, **self._by_role}
        return extended

    def without_role(self) -> list[str]:
        """Bound tools that serve no role: structured-output schemas, or tools the model cannot use."""
        served = {t.name for t in self._by_role.values()}
        return [name for name in self.tools if name not in served]

    def writes_without_role(self) -> list[BoundTool]:
        """Write tools no role serves (one added later as a registry entry): those that
        describe themselves with a title and do not say they are read-only. A
        structured-output schema has neither."""
        return [t for name in self.without_role() if (t := self.tools[name]).title and not t.read_only]

    def fit(self, role: Role, args: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` limited to the arguments the role's tool takes (a filter it lacks is left out)."""
        tool = self._by_role.get(role)
        if tool is None or not tool.properties:
            return dict(args)
        return {k: v for k, v in args.items() if k in tool.properties}
