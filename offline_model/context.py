"""What a planning pass works with, and its primitives: which tool serves a role, and reads.

A read either has its result in this question's history already, or becomes a call to
make now. Helpers return a :class:`Step` when the plan must stop there (calls to make, or
an answer) and the value they looked for otherwise; callers pass a ``Step`` straight up.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from offline_model import compose as c
from offline_model.catalog import ToolCatalog
from offline_model.intents import Request
from offline_model.records import RecordIndex
from offline_model.roles import ReadRole, Role
from offline_model.state import Call, ToolResult, Turn
from offline_model.steps import PlannedCall, Step, answer

ReadCall = tuple[ReadRole, dict[str, Any]]


@dataclass
class PlanContext:
    """One request, this question's calls so far, the bound tools and the ids seen in the conversation."""

    req: Request
    turn: Turn
    tools: ToolCatalog
    records: RecordIndex
    today: dt.date

    def help(self) -> Step:
        """What the copilot can do with the tools bound here (a few examples when the question was not read)."""
        if self.req.unread:
            return answer(c.unread_text(self.tools.has))
        text = c.help_text(self.tools.has)
        # Write tools no role serves are named by their own titles (asked for the same way).
        titles = [tool.title[:1].lower() + tool.title[1:] for tool in self.tools.writes_without_role()]
        return answer(text + "".join(f"\n- {title}, for your approval" for title in titles))

    def require(self, role: Role, what: str) -> Step | None:
        """A plain "I can't" when no bound tool serves ``role``; ``None`` when one does."""
        if self.tools.has(role):
            return None
        return answer(
            f"I can't {what} in this session: no tool for that is available here. "
            "I can still look things up for you."
        )

    def calls(self, role: Role) -> list[Call]:
        """This question's calls of the tool serving ``role``, oldest first."""
        name = self.tools.name(role)
        return self.turn.all(name) if name else []

    def read(self, role: ReadRole, args: dict[str, Any], what: str = "look that up") -> ToolResult | Step:
        """The result of one read, or the step that makes it (or says it cannot be made)."""
        missing = self.require(role, what)
        if missing is not None:
            return missing
        results = self.read_all([(role, args)])
        return results if isinstance(results, Step) else results[role]

    def read_each(self, calls: list[ReadCall]) -> list[tuple[ReadRole, ToolResult]] | Step:
        """Results of independent reads (unbound roles skipped), or ONE step making every missing one."""
        missing: list[PlannedCall] = []
        results: list[tuple[ReadRole, ToolResult]] = []
        for role, args in calls:
            name = self.tools.name(role)
            if name is None:
                continue
            fitted = self.tools.fit(role, args)
            done = self.turn.find(name, fitted)
            if done is None:
                if PlannedCall(name, fitted) not in missing:
                    missing.append(PlannedCall(name, fitted))
            else:
                # A call without a result (history trimmed mid-step) is not retried: that
                # could loop; it reads as "no data right now".
                results.append((role, done.result or ToolResult(text="", error_code="unavailable")))
        if missing:
            return Step(calls=missing)
        return results

    def read_all(self, calls: list[ReadCall]) -> dict[ReadRole, ToolResult] | Step:
        """Like :meth:`read_each`, by role (one read per role)."""
        results = self.read_each(calls)
        return results if isinstance(results, Step) else dict(results)
