"""The product uses only the public APIs of LangChain, LangGraph, LangSmith, MCP and botbuilder,
and never rewrites a module it did not write.

An underscore name (``langchain.agents.middleware._redaction``, ``_setup_run``) is private
to its package and may change in any release; reassigning another module's global
(``factory.traceable = ...``) changes it for every thread of the process. Every product
module (``copilot/``, ``bot/``, ``functions/``, ``function_app.py``) is parsed and read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("copilot", "bot", "functions", "function_app.py")
FIRST_PARTY = {"copilot", "bot", "functions", "function_app", "sandbox", "tests"}
GUARDED = ("langchain", "langgraph", "langsmith", "mcp", "botbuilder")
"""Their families too: ``langchain_core``, ``langchain_openai``, ``langgraph_sdk`` and so on."""


def product_modules() -> list[Path]:
    found: list[Path] = []
    for entry in PRODUCT:
        path = ROOT / entry
        found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return found


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def _guarded(module: str) -> bool:
    top = _top(module)
    return any(top == name or top.startswith(name + "_") for name in GUARDED)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@dataclass(frozen=True)
class Bound:
    """A name a module's imports bind, and the module it came from."""

    name: str
    module: str


def _bindings(tree: ast.AST) -> Iterator[Bound]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # "import a.b.c" binds "a"; "import a.b.c as d" binds "d" to a.b.c.
                yield Bound(alias.asname or _top(alias.name), alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name != "*":
                    yield Bound(alias.asname or alias.name, f"{node.module}.{alias.name}")


def _root(node: ast.expr) -> str | None:
    """``a`` of ``a.b.c`` (and of ``a.b[0].c``)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _module_state(node: ast.expr, foreign: dict[str, str]) -> str | None:
    """The foreign module (or object of one) whose state assigning to ``node`` would change."""
    if isinstance(node, ast.Attribute):
        root = _root(node)
        return foreign.get(root) if root else None
    if isinstance(node, ast.Subscript):
        inner = node.value
        # sys.modules[...] = ..., module.__dict__[...] = ..., vars(module)[...] = ...
        if isinstance(inner, ast.Attribute) and inner.attr in {"modules", "__dict__"}:
            root = _root(inner)
            return foreign.get(root) if root else None
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Name)
            and inner.func.id == "vars"
            and inner.args
            and (root := _root(inner.args[0])) is not None
        ):
            return foreign.get(root)
    return None


def private_uses(source: str, where: str) -> list[str]:
    """Imports of an underscore module or name of a guarded package, and underscore
    attributes read off a name imported from one."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _guarded(alias.name) and any(_private(s) for s in alias.name.split(".")):
                    found.append(f"{where}:{node.lineno} imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _guarded(node.module):
            if any(_private(s) for s in node.module.split(".")):
                found.append(f"{where}:{node.lineno} imports from {node.module}")
            found += [
                f"{where}:{node.lineno} imports {node.module}.{alias.name}"
                for alias in node.names
                if _private(alias.name)
            ]
    guarded = {b.name: b.module for b in _bindings(tree) if _guarded(b.module)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in guarded
        ):
            found.append(f"{where}:{node.lineno} reads {guarded[node.value.id]}.{node.attr}")
    return found


def foreign_rewrites(source: str, where: str) -> list[str]:
    """Assignments (and deletions, setattr, delattr) to the state of a module we did not
    write, or of anything imported from one."""
    tree = ast.parse(source)
    foreign = {b.name: b.module for b in _bindings(tree) if _top(b.module) not in FIRST_PARTY}
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt | ast.expr):
            continue
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"setattr", "delattr"}
            and node.args
        ):
            root = _root(node.args[0])
            if root is not None and root in foreign:
                found.append(f"{where}:{node.lineno} {node.func.id}({foreign[root]}, ...)")
        flat: list[ast.expr] = []
        for target in targets:
            flat += target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
        for target in flat:
            module = _module_state(target, foreign)
            if module is not None:
                found.append(f"{where}:{node.lineno} assigns {ast.unparse(target)} (of {module})")
    return found


def _guarded_private_members() -> frozenset[str]:
    """Underscore members of the guarded packages' classes the product works with: read off
    another object (``model._generate(...)``, ``model._get_ls_params()``), they are private."""
    from botbuilder.core import ActivityHandler, TurnContext
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import Runnable
    from langchain_core.tools import BaseTool
    from langchain_core.tracers.langchain import LangChainTracer
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore
    from mcp import ClientSession

    classes = (
        ActivityHandler,
        TurnContext,
        AgentMiddleware,
        BaseChatModel,
        Runnable,
        BaseTool,
        LangChainTracer,
        BaseCheckpointSaver,
        BaseStore,
        ClientSession,
    )
    return frozenset(name for cls in classes for name in dir(cls) if _private(name))


def private_member_uses(source: str, where: str, members: frozenset[str]) -> list[str]:
    """``x._member`` where ``_member`` belongs to a guarded class and ``x`` is not ``self``,
    ``cls`` or ``super()`` (an override calling its own base is the classes' extension API)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in members):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in {"self", "cls"}:
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.append(f"{where}:{node.lineno} reads {ast.unparse(node)}")
    return found


def _read(path: Path) -> tuple[str, str]:
    return path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))


def test_every_product_package_is_read():
    read = {path.relative_to(ROOT).parts[0] for path in product_modules()}

    assert read == {"copilot", "bot", "functions", "function_app.py"}
    assert len(product_modules()) > 100


def test_no_product_module_uses_a_private_module_or_name_of_langchain_langgraph_langsmith_mcp_or_botbuilder():
    offending = [line for path in product_modules() for line in private_uses(*_read(path))]

    assert offending == [], "\n".join(offending)


def test_no_product_module_reads_a_private_member_of_a_langchain_langgraph_mcp_or_botbuilder_object():
    members = _guarded_private_members()
    offending = [line for path in product_modules() for line in private_member_uses(*_read(path), members)]

    assert offending == [], "\n".join(offending)


@pytest.mark.parametrize(
    "source",
    [
        "def f(model):\n    return model._generate([])",
        "async def f(model):\n    return await model._agenerate([])",
        "def f(model):\n    return model._get_ls_params()",
        "def f(models):\n    return [m._llm_type for m in models]",
        "def f(tracer, run):\n    tracer._start_trace(run)",
        "def f(self):\n    return self.model._generate([])",
    ],
)
def test_a_private_member_read_off_another_object_is_found(source: str):
    assert private_member_uses(source, "seeded.py", _guarded_private_members()) != []


@pytest.mark.parametrize(
    "source",
    [
        "class M:\n    def _generate(self, m):\n        return super()._generate(m)",
        "class M:\n    def f(self):\n        return self._llm_type",
        "def f(handle):\n    return handle._begun",
    ],
)
def test_overrides_calling_their_base_and_our_own_private_state_are_left_alone(source: str):
    assert private_member_uses(source, "ok.py", _guarded_private_members()) == []


def test_no_product_module_reassigns_the_globals_of_a_module_it_did_not_write():
    offending = [line for path in product_modules() for line in foreign_rewrites(*_read(path))]

    assert offending == [], "\n".join(offending)


# --- the checks themselves: each kind of violation, written into a module, is found ----------------


@pytest.mark.parametrize(
    "source",
    [
        "from langchain.agents.middleware._redaction import PIIMatch",
        "from langchain.agents.middleware._retry import calculate_delay",
        "from langsmith._runtime_overrides import get_runtime_overrides",
        "import langsmith._internal._aiter as aiter",
        "import langchain_core._api",
        "from langchain.agents.factory import _chain_model_call_handlers",
        "from langgraph.pregel import _loop",
        "from mcp.client import _transport",
        "from botbuilder.core import _helpers",
        "from langsmith import run_helpers\nrun_helpers._setup_run",
        "def f():\n    from langsmith import utils\n    return utils._get_tracer_project()",
    ],
)
def test_a_private_import_or_attribute_of_a_guarded_package_is_found(source: str):
    assert private_uses(source, "seeded.py") != []


@pytest.mark.parametrize(
    "source",
    [
        "from langchain.agents import factory\nfactory.traceable = lambda *a, **k: (lambda f: f)",
        "def f():\n    from langchain.agents import factory\n    factory.traceable = None",
        "import langchain.agents.factory\nlangchain.agents.factory.traceable = None",
        "import langsmith.utils as u\nu.tracing_is_enabled = lambda: False",
        "from langsmith import utils\nsetattr(utils, 'tracing_is_enabled', None)",
        "from langsmith import utils\ndelattr(utils, 'tracing_is_enabled')",
        "from langchain.agents.middleware import PIIMiddleware\nPIIMiddleware.name = 'x'",
        "import asyncio\nasyncio.sleep = None",
        "import httpx\nhttpx.Client.timeout += 1",
        "import sys\nsys.modules['langchain'] = None",
        "import httpx\nvars(httpx)['Client'] = None",
        "from langgraph import types\ndel types.Command",
        "from langgraph import types\ntypes.a, x = 1, 2",
    ],
)
def test_an_assignment_to_another_modules_state_is_found(source: str):
    assert foreign_rewrites(source, "seeded.py") != []


@pytest.mark.parametrize(
    "source",
    [
        "from langchain.agents.middleware import PIIMiddleware, PIIMatch",
        "from langsmith import set_runtime_overrides, utils\nutils.tracing_is_enabled()",
        "from langsmith import __version__",
        "from copilot.tracing import untraced\nuntraced._tracing_in_process = True",
        "from . import _private\n_private.x = 1",
        "import random\nclass A:\n    rng = random.Random()\na = A()\na.rng = None",
        "import dataclasses\nx = dataclasses.field()\nitems = {}\nitems['k'] = 1",
        "from langchain.agents.middleware import AgentMiddleware\n"
        "class M(AgentMiddleware):\n    after_model = AgentMiddleware.after_model",
    ],
)
def test_public_imports_and_our_own_state_are_left_alone(source: str):
    assert private_uses(source, "ok.py") == []
    assert foreign_rewrites(source, "ok.py") == []
