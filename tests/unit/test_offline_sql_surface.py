"""The offline model on a generic SQL read surface (Dataverse's MCP tools): it composes SQL.

The bound tools are the emulator's own ``tools/list`` (its read-only tools, as the copilot binds
them) plus the copilot's registered write tools. Every query the model plans must pass the
sandbox's own Dataverse SQL-subset validator, and is run by the sandbox's SQL runner over a
small fixed data set, so the answers cite the GUIDs the rows hold and the write proposals carry
them, for each question family of the README's demo table.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable

from copilot.crm.sql_schema import SCHEMA_TABLES, schema_note, table_line
from copilot.prompts import system_prompt
from copilot.writes import REGISTRY
from copilot.writes import write_tools as registered_write_tools
from offline_model import OfflineChatModel
from offline_model.sql import METADATA_KEY
from sandbox.config import SandboxSettings
from sandbox.dataverse import sql
from sandbox.dataverse.mcp_tools import READ_TOOLS, build_dataverse_mcp, describe_table
from sandbox.dataverse.schema import Entity, entities
from sandbox.knobs import KnobState

TODAY = dt.date(2026, 5, 6)
REP = "Alex Wilber"
_GUID_RE = re.compile(r"\[([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\]")


def gid(name: str) -> str:
    """A stable GUID per fixture record."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"test:{name}"))


ALEX, MEGAN = gid("alex"), gid("megan")
ACME, CONTOSO = gid("acme"), gid("contoso")
RENEWAL, EXPANSION, PILOT = gid("renewal"), gid("expansion"), gid("pilot")
MARIA, TOM = gid("maria"), gid("tom")
CALL = gid("call")

ROWS: dict[str, list[dict[str, Any]]] = {
    "systemuser": [
        {"systemuserid": ALEX, "fullname": REP, "statecode": 0},
        {"systemuserid": MEGAN, "fullname": "Megan Bowen", "statecode": 0},
    ],
    "account": [
        {
            "accountid": ACME,
            "name": "Acme Corporation",
            "address1_city": "Seattle",
            "new_industry": "Manufacturing",
            "_ownerid_value": ALEX,
            "statecode": 0,
        },
        {
            "accountid": CONTOSO,
            "name": "Contoso Ltd",
            "address1_city": "Redmond",
            "_ownerid_value": MEGAN,
            "statecode": 0,
        },
    ],
    "opportunity": [
        {
            "opportunityid": RENEWAL,
            "name": "Acme Corporation — Renewal 2027",
            "stepname": "3-Proposal",
            "estimatedvalue": 240000,
            "estimatedclosedate": "2026-06-15",
            "closeprobability": 60,
            "description": "Send revised pricing",
            "_parentaccountid_value": ACME,
            "_ownerid_value": ALEX,
            "statecode": 0,
        },
        {
            "opportunityid": EXPANSION,
            "name": "Acme Corporation — Expansion",
            "stepname": "2-Qualify",
            "estimatedvalue": 50000,
            "estimatedclosedate": "2026-09-30",
            "closeprobability": 20,
            "_parentaccountid_value": ACME,
            "_ownerid_value": ALEX,
            "statecode": 0,
        },
        {
            "opportunityid": PILOT,
            "name": "Contoso Ltd — Pilot",
            "stepname": "1-Prospect",
            "estimatedvalue": 10000,
            "estimatedclosedate": "2026-05-20",
            "closeprobability": 10,
            "_parentaccountid_value": CONTOSO,
            "_ownerid_value": MEGAN,
            "statecode": 0,
        },
    ],
    "contact": [
        {
            "contactid": MARIA,
            "fullname": "Maria Garcia",
            "firstname": "Maria",
            "lastname": "Garcia",
            "jobtitle": "CFO",
            "_parentcustomerid_value": ACME,
            "statecode": 0,
        },
        {
            "contactid": TOM,
            "fullname": "Tom Lee",
            "firstname": "Tom",
            "lastname": "Lee",
            "jobtitle": "VP Engineering",
            "_parentcustomerid_value": ACME,
            "statecode": 0,
        },
    ],
    "activitypointer": [
        {
            "activityid": CALL,
            "subject": "Pricing call",
            "description": "Discussed the renewal price",
            "activitytypecode": "phonecall",
            "actualend": "2026-05-01T10:00:00Z",
            "createdon": "2026-05-01T10:30:00Z",
            "_regardingobjectid_value": RENEWAL,
            "_ownerid_value": ALEX,
            "statecode": 1,
        },
    ],
}


class FakeSnapshot:
    """What the sandbox's SQL runner reads: the visible rows of each table."""

    def rows(self, name: str) -> list[dict[str, Any]]:
        return ROWS.get(name, [])


def _tables() -> dict[str, Entity]:
    return entities(SandboxSettings().dataverse_activity_key)


def emulator_read_tools(renames: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The emulator's ``tools/list`` read-only tools, as JSON tool definitions with their
    annotations (renamed as the emulator's ``dataverse_mcp_tool_names`` knob would)."""
    server = build_dataverse_mcp(SandboxSettings(), KnobState(), SimpleNamespace(tables=_tables()))  # type: ignore[arg-type]
    listed = asyncio.run(server.list_tools())
    return [
        {
            "name": (renames or {}).get(t.name, t.name),
            "description": t.description,
            "parameters": t.inputSchema,
            "annotations": t.annotations.model_dump(exclude_none=True) if t.annotations else {},
        }
        for t in listed
        if t.annotations is not None and t.annotations.readOnlyHint
    ]


def prompt(with_schema: bool = True) -> str:
    """The system prompt as the copilot sends it on the Dataverse profile."""
    text = f"{system_prompt(REGISTRY)}\n\nYou are assisting {REP}. Today is {TODAY.isoformat()}."
    if with_schema:
        note = schema_note("read_query", [table_line(t, describe_table(_tables()[t])) for t in SCHEMA_TABLES])
        text += f"\n\n{note}"
    return text


@dataclass
class Outcome:
    """How one question went: the answer, the queries run, the proposed writes."""

    answer: str = ""
    queries: list[str] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)
    messages: list[BaseMessage] = field(default_factory=list)


def bound_model(renames: dict[str, str] | None = None) -> Runnable[Any, AIMessage]:
    tools: list[Any] = [
        *emulator_read_tools(renames),
        *[t.langchain_tool() for t in registered_write_tools()],
    ]
    return OfflineChatModel(today=TODAY).bind_tools(tools)


def ask(
    question: str,
    history: list[BaseMessage] | None = None,
    *,
    with_schema: bool = True,
    renames: dict[str, str] | None = None,
) -> Outcome:
    """Run one question to its answer or its write proposals, answering each query like the emulator."""
    model = bound_model(renames)
    reads = {(renames or {}).get(name, name) for name in READ_TOOLS}
    query_tool = (renames or {}).get("read_query", "read_query")
    messages: list[BaseMessage] = history or [SystemMessage(content=prompt(with_schema))]
    messages.append(HumanMessage(content=question))
    out = Outcome(messages=messages)
    for _ in range(8):
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            out.answer = reply.text
            return out
        writes = [tc for tc in reply.tool_calls if tc["name"] not in reads]
        if writes:
            out.proposals = [{"tool": tc["name"], "args": tc["args"]} for tc in writes]
            return out
        for tc in reply.tool_calls:
            assert tc["name"] == query_tool, tc
            assert set(tc["args"]) == {"querytext"}
            query = tc["args"]["querytext"]
            sql.validate(query)  # the sandbox's own subset check: raises on anything outside it
            out.queries.append(query)
            result = sql.run(query, FakeSnapshot(), _tables(), 50)  # type: ignore[arg-type]
            messages.append(ToolMessage(content=json.dumps(result), tool_call_id=tc["id"], name=tc["name"]))
    raise AssertionError("no answer after 8 model calls")


def cited(text: str) -> set[str]:
    return set(_GUID_RE.findall(text))


def test_summarise_an_account_reads_with_sql_and_cites_guids() -> None:
    out = ask("summarise Acme")
    assert out.queries
    assert all(q.startswith("SELECT") for q in out.queries)
    assert {ACME, RENEWAL, EXPANSION} <= cited(out.answer)
    assert "Acme Corporation" in out.answer
    assert "Proposal" in out.answer
    assert PILOT not in cited(out.answer)  # another account's deal is not in the summary


def test_my_deals_closing_this_quarter_are_the_reps_own_in_the_quarter() -> None:
    out = ask("my deals closing this quarter")
    assert any("2026-04-01" in q and "2026-06-30" in q for q in out.queries)
    assert cited(out.answer) >= {RENEWAL}
    assert EXPANSION not in cited(out.answer)  # closes next quarter
    assert PILOT not in cited(out.answer)  # Megan's deal


def test_how_many_open_deals_counts_the_accounts_open_deals() -> None:
    out = ask("how many open deals does Acme have?")
    assert "2 open opportunities" in out.answer
    assert {ACME, RENEWAL, EXPANSION} <= cited(out.answer)


def test_who_holds_a_title_at_an_account() -> None:
    out = ask("who is the CFO at Acme?")
    assert "Maria Garcia" in out.answer
    assert MARIA in cited(out.answer)
    assert TOM not in cited(out.answer)


def test_a_deals_next_step_then_its_amount_follows_up_on_the_same_deal() -> None:
    first = ask("what's the next step on the acme renewal?")
    assert "Send revised pricing" in first.answer
    assert RENEWAL in cited(first.answer)
    second = ask("and its amount?", first.messages)
    assert "240,000" in second.answer
    assert RENEWAL in cited(second.answer)


def test_recent_activities_of_an_account_include_its_deals_activities() -> None:
    out = ask("what did we discuss with Acme recently?")
    assert "Pricing call" in out.answer
    assert CALL in cited(out.answer)


def test_log_a_call_proposes_the_write_with_the_accounts_guid() -> None:
    out = ask("log a call with Acme — discussed pricing, next step send proposal")
    assert [p["tool"] for p in out.proposals] == ["log_activity"]
    assert out.proposals[0]["args"]["account_id"] == ACME


def test_updating_a_deal_proposes_the_change_with_the_deals_guid() -> None:
    out = ask("push the Acme renewal to Dec 15 and move it to negotiation")
    assert [p["tool"] for p in out.proposals] == ["update_opportunity"]
    args = out.proposals[0]["args"]
    assert args["opportunity_id"] == RENEWAL
    assert args["close_date"] == "2026-12-15"
    assert args["stage"] == "Negotiation"


def test_drafting_a_follow_up_proposes_the_draft_to_the_contacts_guid() -> None:
    out = ask("draft a follow-up to Maria at Acme about pricing")
    assert len(out.proposals) == 1
    assert out.proposals[0]["args"]["contact_id"] == MARIA


def test_the_pipeline_groups_with_sql_aggregates() -> None:
    out = ask("show my pipeline")
    assert any("GROUP BY" in q and "COUNT(" in q and "SUM(" in q for q in out.queries)
    assert RENEWAL in cited(out.answer)


@pytest.mark.parametrize("with_schema", [True, False])
def test_without_the_schema_note_the_standard_names_are_used(with_schema: bool) -> None:
    out = ask("how many open deals does Acme have?", with_schema=with_schema)
    assert "2 open opportunities" in out.answer


def test_the_model_notes_which_read_each_query_was() -> None:
    out = ask("who is the CFO at Acme?")
    noted = [
        m.response_metadata.get(METADATA_KEY)
        for m in out.messages
        if isinstance(m, AIMessage) and m.tool_calls
    ]
    assert noted
    assert all(isinstance(n, dict) and n for n in noted)


def test_a_rep_typed_quote_cannot_end_the_sql_literal() -> None:
    out = ask("summarise O'Brien'); DROP TABLE account; --")
    assert all(q.count("'") % 2 == 0 for q in out.queries)


def test_a_renamed_query_tool_is_still_found_by_its_shape() -> None:
    out = ask("who is the CFO at Acme?", renames={"read_query": "dv_sql", "describe": "dv_table"})
    assert out.queries
    assert MARIA in cited(out.answer)


def test_slipping_a_deal_makes_the_close_date_concrete_from_the_deals_own_date() -> None:
    out = ask("slip the Acme renewal two weeks")
    assert [p["tool"] for p in out.proposals] == ["update_opportunity"]
    assert out.proposals[0]["args"]["opportunity_id"] == RENEWAL
    assert out.proposals[0]["args"]["close_date"] == "2026-06-29"
