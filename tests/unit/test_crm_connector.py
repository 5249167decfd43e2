"""The CRM connector seam: who may name a CRM's tools, where the vocabulary comes from, the settings."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.types import Tool

from bot.cards import approval_card, editable_fields
from copilot.crm import reference
from copilot.crm.connector import expected_tools
from copilot.errors import ConfigurationError
from copilot.progress import describe_tool_call
from copilot.settings import Settings
from copilot.tools.schemas import LogActivityArgs, UpdateOpportunityArgs
from copilot.turns import Proposal
from copilot.vocabulary import REFERENCE_VOCABULARY, Vocabulary, current_vocabulary, install_vocabulary
from copilot.writes import REGISTRY, write_tool
from copilot.writes.crm import apply_vocabulary

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("copilot", "bot", "functions")
CONNECTOR = ROOT / "copilot" / "crm"
DATAVERSE = Vocabulary(
    stages=("Qualify", "Develop", "Propose", "Close"),
    stage_codes={"Qualify": 0, "Develop": 1, "Propose": 2, "Close": 3},
    activity_types=("call", "meeting", "task"),
    opportunity_fields=("stage", "close_date", "amount"),
    source="test",
)


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _crm_tool_names_outside_the_connector(names: frozenset[str]) -> list[str]:
    found = []
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if CONNECTOR in path.parents:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{line}: {value!r}"
                for line, value in _strings(path)
                if value in names
            ]
    return found


def test_no_product_module_outside_the_connector_names_a_crm_tool():
    reads, writes = reference.expected_tools()
    # ``update_opportunity`` is also the copilot's own write tool's name (the model's, the
    # audit's): that is the copilot's word, not the CRM's, so it cannot be told apart here.
    names = (reads | writes) - set(REGISTRY)
    assert reference.UPSERT_ACTIVITY in names
    assert reference.GET_OPPORTUNITY in names

    assert _crm_tool_names_outside_the_connector(names) == []


def _reference_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import the reference connector (whose constants name its tools)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            names = {alias.name for alias in node.names}
        else:
            continue
        if any(n == "copilot.crm.reference" or n.startswith("copilot.crm.reference.") for n in names):
            found.append(node.lineno)
    return found


def test_no_product_module_outside_the_connector_imports_the_reference_crms_tool_names():
    # Naming a tool through the connector's constants (``reference.GET_ACCOUNT``) is naming it
    # too: briefs, the digest, team analytics and the progress lines go through the connector's
    # typed reads and its progress lines instead, so they work on any CRM.
    found = []
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if CONNECTOR in path.parents:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in _reference_imports(path)]
    assert found == []


def test_the_import_scan_finds_the_reference_connector_imported(tmp_path: Path):
    module = tmp_path / "leak.py"
    module.write_text(
        "from copilot.crm import reference\nimport copilot.crm.reference\n"
        "from copilot.crm.reference import GET_ME\nfrom copilot.crm import connector\n"
    )
    assert _reference_imports(module) == [1, 2, 3]


def test_a_reference_read_tool_gets_its_progress_line_and_any_other_tool_a_generic_one():
    names = {"acc-1": "Acme"}
    assert describe_tool_call("list_opportunities", {"account_id": "acc-1"}, names).message == (
        "Looking up Acme's opportunities…"
    )
    assert describe_tool_call("get_me", {}, names).message == "Looking you up in the CRM…"
    # Dataverse's read tools are discovered (and may be renamed): no CRM-specific line.
    assert describe_tool_call("read_query", {"querytext": "SELECT name FROM account"}, names).message == (
        "Calling read_query…"
    )
    assert describe_tool_call("search_knowledge", {}, names).message.startswith("Searching the playbooks")


def test_the_tool_name_scan_finds_a_crm_tool_named_in_a_product_module(tmp_path: Path):
    # The scan itself can fail: a string constant equal to a CRM tool's name is found.
    module = tmp_path / "leak.py"
    module.write_text('TOOL = "void_activity"\n"""Prose that mentions void_activity is not a name."""\n')

    assert list(_strings(module)) == [
        (1, "void_activity"),
        (2, "Prose that mentions void_activity is not a name."),
    ]
    assert [v for _, v in _strings(module) if v in reference.expected_tools()[1]] == ["void_activity"]


def test_doctor_expects_the_reference_crms_tools_and_no_mcp_tool_of_dataverse():
    reads, writes = expected_tools(Settings(CRM_KIND="reference"))
    assert {reference.GET_ME, reference.GET_OPPORTUNITY} <= reads
    assert writes == {reference.UPSERT_ACTIVITY, reference.UPDATE_OPPORTUNITY, reference.VOID_ACTIVITY}

    assert expected_tools(Settings(CRM_KIND="dataverse", CRM_URL="https://org.crm.dynamics.com")) == (
        frozenset(),
        frozenset(),
    )


def _upsert_tool(enum: list[str] | None) -> Tool:
    properties = {"type": {"type": "string", "enum": enum}} if enum is not None else {}
    return Tool(name=reference.UPSERT_ACTIVITY, inputSchema={"type": "object", "properties": properties})


def test_the_reference_crms_activity_types_come_from_its_upsert_tool_schema():
    vocabulary = reference.vocabulary_from_tools([_upsert_tool(["call", "visit"])])

    assert vocabulary.activity_types == ("call", "visit")
    assert vocabulary.stages == REFERENCE_VOCABULARY.stages  # it declares none: the fallback
    assert "upsert_activity" in vocabulary.source


def test_a_reference_crm_that_declares_nothing_gets_the_fallback_vocabulary():
    assert reference.vocabulary_from_tools([]) == REFERENCE_VOCABULARY
    assert reference.vocabulary_from_tools([_upsert_tool(None)]) == REFERENCE_VOCABULARY


@pytest.fixture
def dataverse_words() -> Iterator[Vocabulary]:
    """The process's write tools built from a Dataverse vocabulary, restored afterwards."""
    before = current_vocabulary()
    apply_vocabulary(DATAVERSE)
    try:
        yield DATAVERSE
    finally:
        apply_vocabulary(before)
        install_vocabulary(None)


def test_the_write_tools_schemas_and_the_cards_choices_follow_the_crms_vocabulary(dataverse_words):
    update = write_tool("update_opportunity")
    log = write_tool("log_activity")
    assert update is not None
    assert log is not None
    assert issubclass(update.args_schema, UpdateOpportunityArgs)
    assert update.args_schema.model_validate({"opportunity_id": "o-1", "stage": "Propose"})
    with pytest.raises(ValueError, match="stage"):
        update.args_schema.model_validate({"opportunity_id": "o-1", "stage": "Negotiation"})
    with pytest.raises(ValueError, match="type"):
        log.args_schema.model_validate({"type": "email", "subject": "s", "account_id": "a-1"})
    # The CRM does not let the copilot change next_step: the card does not offer it.
    assert update.editable == ("stage", "close_date", "amount")

    stage = next(spec for spec in editable_fields("update_opportunity") if spec.name == "stage")
    assert stage.choices == DATAVERSE.stages
    kind = next(spec for spec in editable_fields("log_activity") if spec.name == "type")
    assert kind.choices == DATAVERSE.activity_types
    card = approval_card(
        Proposal(
            tool_call_id="call_1",
            tool="update_opportunity",
            args={"opportunity_id": "o-1", "stage": "Develop"},
            record=None,
            description="",
            interrupt_id="int-1",
        ),
        thread_id="thr-1",
        view="edit",
    )
    assert '"Propose"' in str(card).replace("'", '"')


def test_the_reference_vocabulary_keeps_the_static_schemas_in_their_place():
    order = list(REGISTRY)
    apply_vocabulary(REFERENCE_VOCABULARY)
    try:
        assert write_tool("update_opportunity").args_schema is UpdateOpportunityArgs  # type: ignore[union-attr]
        assert write_tool("log_activity").args_schema is LogActivityArgs  # type: ignore[union-attr]
        assert list(REGISTRY) == order
    finally:
        install_vocabulary(None)


def test_dataverse_derives_its_mcp_endpoint_resource_and_scopes_from_crm_url():
    settings = Settings(CRM_KIND="dataverse", CRM_URL="https://contoso.crm.dynamics.com")

    assert settings.crm_mcp_url == "https://contoso.crm.dynamics.com/api/mcp"
    assert settings.crm_resource == "https://contoso.crm.dynamics.com"
    assert settings.crm_scopes(write=True) == [
        "https://contoso.crm.dynamics.com/user_impersonation",
        "https://contoso.crm.dynamics.com/mcp.tools",
    ]
    assert settings.crm_dataverse_key_column == "new_copilotkey"


def test_explicit_crm_mcp_url_and_resource_override_the_derived_ones():
    settings = Settings(
        CRM_KIND="dataverse",
        CRM_URL="https://contoso.crm.dynamics.com",
        CRM_MCP_URL="https://gateway.example/mcp",
        CRM_RESOURCE="https://contoso.crm.dynamics.com/",
    )

    assert settings.crm_mcp_url == "https://gateway.example/mcp"
    assert settings.crm_resource == "https://contoso.crm.dynamics.com/"


def test_dataverse_without_crm_url_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="CRM_URL"):
        Settings(CRM_KIND="dataverse")


def test_the_reference_crm_stays_the_default_with_its_own_scopes():
    settings = Settings()

    assert settings.crm_kind == "reference"
    assert settings.crm_scopes(write=False) == ["api://sandbox-crm/crm.read"]
