"""The scripted chat model both sides of the bench use (no provider, no network).

Its answer is a pure function of the messages it is sent, so one instance serves any
number of turns on any number of threads, and the copilot and the bare agent get exactly
the same responses: for a read question, two parallel CRM read tool calls and then an
answer citing the records; for a write question, one proposed write and then a short
confirmation. Which read tools it calls is the scenario's (:meth:`ReadScenario.reads`: the
reference CRM's tools by name, or Dataverse's query tool as discovered, asked in SQL).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from bench.scenarios import ReadScenario, Scenarios, WriteScenario


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}


def message_chars(message: BaseMessage) -> int:
    """Characters a provider would be sent for ``message`` (text, tool calls)."""
    content = message.content
    chars = len(content) if isinstance(content, str) else len(json.dumps(content, default=str))
    if isinstance(message, AIMessage):
        chars += sum(len(json.dumps(c, default=str)) for c in message.tool_calls)
    return chars


class BenchChatModel(BaseChatModel):
    """Scripted: reads then an answer (``read``), or a proposed write then a confirmation
    (``write``).

    ``write_tool`` names the tool the write is proposed with: the copilot's ``log_activity``,
    or for the bare agent the CRM's own MCP write tool: the reference CRM's ``upsert_activity``
    (which needs its own key) or Dataverse's ``create_record`` (a ``phonecall`` row, the account
    bound as its regarding record; no key, no version: Dataverse's MCP write tools take neither).
    """

    write_tool: str = "log_activity"
    tool_chars: int = 0
    """Characters of the JSON schemas of the tools bound (what a provider would be sent)."""
    read: ReadScenario
    write: WriteScenario
    lookup: ReadScenario | None = None

    @classmethod
    def scripted(cls, scenarios: Scenarios, *, write_tool: str = "log_activity") -> BenchChatModel:
        """The model playing ``scenarios`` (the run's turn and approve-click scenarios)."""
        return cls(
            read=scenarios.turn, write=scenarios.approve_click, lookup=scenarios.lookup, write_tool=write_tool
        )

    @property
    def _llm_type(self) -> str:
        return "bench-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> BenchChatModel:
        chars = sum(len(json.dumps(convert_to_openai_tool(t), default=str)) for t in tools)
        return self.model_copy(update={"tool_chars": chars})

    def prompt_chars(self, messages: Sequence[BaseMessage]) -> int:
        """Characters of one call's prompt: the messages and the bound tools' schemas."""
        return self.tool_chars + sum(message_chars(m) for m in messages)

    def respond(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The scripted answer to ``messages``."""
        last_human = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        question = str(messages[last_human].content) if last_human >= 0 else ""
        answered = any(isinstance(m, ToolMessage) for m in messages[last_human + 1 :])
        if self.write.question in question:
            if answered:
                return AIMessage(content=self.write.answer)
            return AIMessage(content="", tool_calls=[_call(self.write_tool, self._write_args())])
        read = self.lookup if self.lookup is not None and self.lookup.question in question else self.read
        if answered:
            return AIMessage(content=read.answer)
        return AIMessage(content="", tool_calls=[_call(name, args) for name, args in read.reads()])

    def _write_args(self) -> dict[str, Any]:
        if self.write_tool == "create_record":
            return {
                "tablename": "phonecall",
                "item": {
                    "subject": self.write.subject,
                    "description": self.write.notes,
                    "regardingobjectid_account_phonecall@odata.bind": f"/accounts({self.write.account_id})",
                },
            }
        args: dict[str, Any] = {
            "type": "call",
            "subject": self.write.subject,
            "notes": self.write.notes,
            "account_id": self.write.account_id,
        }
        if self.write_tool == "upsert_activity":
            args["external_id"] = f"bench-{uuid.uuid4().hex}"
        return args

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages))])
