"""Which ids a run's tool results show (the ids an answer may cite)."""

from __future__ import annotations

import json

from langchain_core.messages import ToolMessage

from copilot.citations import ids_in_tool_results


def _result(payload: object) -> ToolMessage:
    return ToolMessage(content=json.dumps(payload), tool_call_id="call_1", name="get_account")


def test_an_id_a_refusal_echoes_back_is_not_shown_so_an_answer_cannot_cite_it() -> None:
    refused = {
        "error": {
            "code": "permission_denied",
            "message": "You do not have access to account acc-0029",
            "details": {"id": "acc-0029"},
        }
    }

    assert ids_in_tool_results([_result(refused)]) == set()


def test_the_ids_of_records_a_result_holds_are_shown() -> None:
    found = {"id": "acc-acme", "opportunities": [{"id": "opp-1", "account_id": "acc-acme"}]}

    assert ids_in_tool_results([_result(found)]) == {"acc-acme", "opp-1"}
