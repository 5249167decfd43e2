"""Summarisation requests (SummarizationMiddleware) and the offline model's extractive summary."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from langchain_core.messages import BaseMessage, HumanMessage

from offline_model.records import cited
from offline_model.state import LATEST_REQUEST_LABEL, SUMMARY_PREFIX, message_text, system_text

# Phrases of LangChain's DEFAULT_SUMMARY_PROMPT (and the gist of any summarisation prompt).
SUMMARY_MARKERS = (
    "Messages to summarize:",
    "Context Extraction Assistant",
    "conversation history below will be replaced",
    "extract the most important and relevant context",
)
SUMMARY_LIMIT = 1500
# Ids in the history: JSON ``"id"`` / ``"<kind>_id"`` values of tool results and calls, and
# the records an earlier summary carried over.
_JSON_ID_RE = re.compile(r'"(?:id|[A-Za-z]+_id)"\s*:\s*"([^"\s]{1,120})"')
_JSON_IDS_RE = re.compile(r'"[A-Za-z]+_ids"\s*:\s*\[([^\]]*)\]')
_CARRIED_IDS_RE = re.compile(r"^- Records referenced: (.*)$", re.M)
# Tool calls in the history, as get_buffer_string renders them (XML or prefix format).
_TOOL_CALL_RE = re.compile(r'<tool_call\b[^>]*\bname="([^"]+)"|\'name\': \'([^\']+)\'')


def is_summary_request(messages: Sequence[BaseMessage]) -> str | None:
    """The summarisation prompt's text if this call is a summarisation request, else ``None``."""
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    candidates = [message_text(humans[-1])] if humans else []
    candidates.append(system_text(messages))
    for text in candidates:
        if sum(marker.lower() in text.lower() for marker in SUMMARY_MARKERS) >= 1 and len(text) > 200:
            if humans:
                return message_text(humans[-1])
            return text
    return None


def history_ids(history: str) -> list[str]:
    """Record ids mentioned in a rendered history, in order of appearance."""
    found: list[tuple[int, str]] = [(m.start(), m.group(1)) for m in _JSON_ID_RE.finditer(history)]
    for m in _JSON_IDS_RE.finditer(history):
        found += [(m.start(), v) for v in re.findall(r'"([^"\s]{1,120})"', m.group(1))]
    for m in _CARRIED_IDS_RE.finditer(history):
        found += [(m.start(), v.strip()) for v in m.group(1).split(",") if v.strip()]
    ids: list[str] = []
    for _, value in sorted(found, key=lambda pair: pair[0]):
        if value not in ids:
            ids.append(value)
    # Citations in earlier answers are ids too (their results may be summarised away).
    ids += [c for c in cited(history) if c not in ids]
    return ids


def extractive_summary(prompt: str) -> str:
    """A deterministic summary of the history inside a summarisation prompt.

    Lists the rep's requests (carrying over those of an earlier summary), the record ids
    mentioned and the tools called, and ends with the latest request so a later call can
    still see what is being worked on. At most ``SUMMARY_LIMIT`` characters.
    """
    history = prompt.split("Messages to summarize:", 1)[-1]
    humans = re.findall(r'<message type="human">(.*?)</message>', history, re.S)
    if not humans:
        humans = re.findall(r"^Human:\s*(.*)$", history, re.M)
    requests: list[str] = []
    for raw in humans:
        text = html.unescape(raw).strip()
        if text.startswith(SUMMARY_PREFIX):
            requests += re.findall(r'^- Rep asked: "(.*)"$', text, re.M)
            continue
        line = " ".join(text.split())
        requests.append(line if len(line) <= 160 else line[:159] + "…")
    ids = history_ids(html.unescape(history))
    tools = sorted({a or b for a, b in _TOOL_CALL_RE.findall(history)})
    latest = requests[-1] if requests else ""

    def render(keep_requests: list[str], keep_ids: list[str]) -> str:
        lines = [
            "## SESSION INTENT",
            "A sales rep using the CRM copilot (questions, drafts and approved updates).",
            "",
            "## SUMMARY",
        ]
        lines += [f'- Rep asked: "{r}"' for r in keep_requests] or ["- None"]
        lines += ["", "## ARTIFACTS"]
        lines.append(f"- Records referenced: {', '.join(keep_ids)}" if keep_ids else "- None")
        if tools:
            lines.append(f"- Tools called: {', '.join(tools)}")
        lines += ["", "## NEXT STEPS", "- Continue with the latest request." if latest else "- None"]
        if latest:
            lines.append(f"{LATEST_REQUEST_LABEL} {latest}")
        return "\n".join(lines)

    keep_requests, keep_ids = requests[-8:], ids[:40]
    summary = render(keep_requests, keep_ids)
    while len(summary) > SUMMARY_LIMIT and (len(keep_requests) > 1 or len(keep_ids) > 5):
        if len(keep_ids) > 5:
            keep_ids = keep_ids[: max(5, len(keep_ids) // 2)]
        else:
            keep_requests = keep_requests[1:]
        summary = render(keep_requests, keep_ids)
    return summary[:SUMMARY_LIMIT]
