"""Answer composition for the offline model: readable markdown built only from tool results.

Every line that states a fact about a record cites that record's id in square brackets,
and only ids taken from tool results are ever cited. Contact emails and phone numbers
arrive masked and are never repeated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, assert_never

from offline_model.roles import Role, WriteRole
from offline_model.state import ToolResult

UNAVAILABLE = "Live CRM data is unavailable right now; please try again shortly."
NO_ACCESS = "You don't have access to that record in the CRM."

_CAPABILITIES: tuple[tuple[Role, str], ...] = (
    ("account_search", 'summarise an account ("summarise" and the account\'s name)'),
    ("opportunity_list", 'list your deals for a period ("my deals closing this quarter")'),
    ("pipeline", "summarise your or your team's pipeline (\"what's in my pipeline\")"),
    ("activity_list", 'show recent activity ("recent activity on" and the account\'s name)'),
    ("contact_list", "list an account's contacts (\"who are my contacts at\" and the account's name)"),
    ("contact_list", 'find who holds a role ("who is the CFO at" and the account\'s name)'),
    ("opportunity_list", "answer one thing about a deal (\"what's the next step on\" and the deal's name)"),
    ("activity_log", "log a call, meeting, email or task for your approval"),
    ("write_undo", 'undo one of your recent changes, for your approval ("undo my last change")'),
    (
        "opportunity_update",
        "propose opportunity changes (stage, close date, amount, next step) for your approval",
    ),
    ("email_draft", "draft a follow-up email into your Outlook drafts (never sent)"),
    ("preferences_update", "change your drafting preferences (tone, signature, follow-up cadence)"),
)


# Questions a rep can ask when one was not read, by the role that answers each: no record
# names (the rep's own book, or an account's name to add).
_EXAMPLES: tuple[tuple[Role, str], ...] = (
    ("opportunity_list", '"What deals do I have open?"'),
    ("opportunity_list", '"What is my biggest deal?"'),
    ("pipeline", '"What\'s in my pipeline this quarter?"'),
    ("account_search", '"Summarise" and an account\'s name'),
    ("activity_list", '"What did I do last week?"'),
)


def action(role: WriteRole) -> str:
    """What a write does, as the end of "I did not …"."""
    match role:
        case "activity_log":
            return "log the activity"
        case "opportunity_update":
            return "update the opportunity"
        case "email_draft":
            return "save the draft email"
        case "preferences_update":
            return "change your preferences"
        case "write_undo":
            return "undo the change"
        case _:
            assert_never(role)


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 opportunity`` / ``3 opportunities``."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def cite(*ids: object) -> str:
    """``[id]`` markers for every non-empty id, separated by spaces."""
    return " ".join(f"[{i}]" for i in ids if isinstance(i, str) and i)


def money(amount: object, currency: object = None) -> str:
    """``USD 240,000`` (cents only when there are any)."""
    if not isinstance(amount, int | float):
        return "amount not set"
    text = f"{amount:,.2f}" if float(amount) % 1 else f"{amount:,.0f}"
    return f"{currency} {text}" if isinstance(currency, str) and currency else text


def _name(value: object) -> str:
    if isinstance(value, dict):
        return str(value.get("name") or value.get("id") or "")
    return str(value or "")


def _short(text: object, limit: int = 140) -> str:
    # Square brackets are reserved for citations: free text from records must not fake one.
    value = " ".join(str(text or "").split()).replace("[", "(").replace("]", ")")
    return value if len(value) <= limit else value[: limit - 1].rstrip() + "…"


def clean(text: object, limit: int = 140) -> str:
    """Record text as it may appear in an answer: one line, bounded, no fake citations."""
    return _short(text, limit)


def opportunity_line(opp: dict[str, Any], *, with_account: bool) -> str:
    """``- Name [id]: Stage, USD 1,000, closes 2026-12-15 — next step: …``."""
    parts = [f"- {opp.get('name', 'Opportunity')} {cite(opp.get('id'))}:"]
    facts = [str(opp.get("stage") or "stage unknown"), money(opp.get("amount"), opp.get("currency"))]
    if opp.get("close_date"):
        facts.append(f"closes {opp['close_date']}")
    parts.append(", ".join(facts))
    account = opp.get("account")
    if with_account and isinstance(account, dict) and account.get("id"):
        parts.append(f"— {_name(account)} {cite(account.get('id'))}")
    if opp.get("next_step"):
        parts.append(f"— next step: {_short(opp['next_step'], 100)}")
    return " ".join(parts)


def activity_line(act: dict[str, Any], *, with_notes: bool) -> str:
    """``- 2026-05-04 call: Subject [id]`` (+ the notes, quoted as data)."""
    when = str(act.get("occurred_at") or "")[:10]
    line = f"- {when} {act.get('type', 'activity')}: {_short(act.get('subject'), 100)} {cite(act.get('id'))}"
    line += activity_extras(act)
    if act.get("voided"):
        line += " (voided)"
    if with_notes and act.get("notes"):
        line += f' — notes: "{_short(act["notes"], 160)}"'
    return line


def activity_extras(act: dict[str, Any]) -> str:
    """`` with Dana Reyes (due 2026-12-15)``: the people an activity names and a task's due date."""
    people = [str(p.get("name")) for p in act.get("contacts") or [] if isinstance(p, dict) and p.get("name")]
    extra = f" with {', '.join(people)}" if people else ""
    if act.get("due_date"):
        extra += f" (due {str(act['due_date'])[:10]})"
    return extra


def contact_line(contact: dict[str, Any]) -> str:
    """``- Dana Reyes, VP Operations [id]`` (never the masked email/phone)."""
    title = f", {contact['title']}" if contact.get("title") else ""
    return f"- {contact.get('name', 'Contact')}{title} {cite(contact.get('id'))}"


def more_note(result: ToolResult) -> str:
    """ "Showing 20 of 43." when a list was cut short, else ""."""
    total = result.obj.get("total")
    shown = len(result.items)
    if isinstance(total, int) and total > shown:
        return f"_Showing {shown} of {total}._"
    if result.obj.get("next_cursor") and shown:
        return f"_Showing the first {shown}; there are more._"
    return ""


def error_sentence(result: ToolResult, what: str = "that record") -> str:
    """The plain-language sentence for a failed tool call."""
    code = result.error_code or "error"
    if result.for_rep and result.error_message:
        return result.error_message[:1].upper() + result.error_message[1:]
    if result.unavailable or "unavailable" in result.error_message.lower():
        return UNAVAILABLE
    if code in ("permission_denied", "forbidden", "insufficient_scope"):
        return NO_ACCESS
    if code == "not_found":
        return f"I couldn't find {what}: it was not found in the CRM (or you can't see it)."
    if code == "validation":
        return f"The CRM refused the request as invalid: {_short(result.error_message, 200)}"
    if code == "idempotency_mismatch":
        return "This write was already recorded with different details, so nothing new was written."
    return f"The CRM returned an error ({code}): {_short(result.error_message, 200)}"


def account_header(account: dict[str, Any]) -> str:
    """``Vandelay Industries [id] — Manufacturing, Springfield; owner Pat Lee.``"""
    facts = [str(v) for v in (account.get("industry"), account.get("city")) if v]
    line = f"{account.get('name', 'Account')} {cite(account.get('id'))}"
    if facts:
        line += " — " + ", ".join(facts)
    owner = _name(account.get("owner"))
    if owner:
        line += f"; owner {owner}"
    return line + "."


def account_rollup(account: dict[str, Any], currency: str | None) -> str:
    """The counts an account read returns, as one cited line ("" when it returned none)."""
    facts: list[str] = []
    if isinstance(account.get("open_opportunities"), int):
        facts.append(plural(account["open_opportunities"], "open opportunity", "open opportunities"))
    if isinstance(account.get("open_pipeline_amount"), int | float):
        facts.append(f"{money(account['open_pipeline_amount'], currency)} open pipeline")
    if isinstance(account.get("activities_last_30_days"), int):
        facts.append(
            plural(account["activities_last_30_days"], "activity", "activities") + " in the last 30 days"
        )
    if isinstance(account.get("contacts"), int):
        facts.append(plural(account["contacts"], "contact"))
    return f"{'; '.join(facts)} {cite(account.get('id'))}." if facts else ""


def common_currency(opps: Iterable[dict[str, Any]]) -> str | None:
    """The one currency all these opportunities share, else ``None``."""
    currencies = {str(o["currency"]) for o in opps if o.get("currency")}
    return currencies.pop() if len(currencies) == 1 else None


def section(title: str, result: ToolResult | None, lines: list[str], empty: str, what: str) -> list[str]:
    """A titled block of lines, or the plain "none"/error sentence."""
    if result is None:
        return []
    out = ["", f"**{title}**"]
    if not result.ok:
        out.append(error_sentence(result, what))
    elif not lines:
        out.append(empty)
    else:
        out.extend(lines)
        note = more_note(result)
        if note:
            out.append(note)
    return out


def help_text(has: Callable[[Role], bool]) -> str:
    """What the copilot can do with the tools available in this session (``has``: is a role served?)."""
    can = [text for role, text in _CAPABILITIES if has(role)]
    if not can:
        return "I can't reach the CRM in this session, so I can't look anything up right now."
    return "I can help with your CRM. For example, I can:\n" + "\n".join(f"- {c}" for c in can)


def unread_text(has: Callable[[Role], bool]) -> str:
    """The honest floor: the question was not read, and a few the tools bound here answer."""
    examples = [text for role, text in _EXAMPLES if has(role)][:4]
    if not examples:
        return help_text(has)
    return (
        "I couldn't read that question. I can help with your CRM; you could ask, for example:\n"
        + "\n".join(f"- {e}" for e in examples)
    )


def rejection_sentence(role: WriteRole, reason: str) -> str:
    """Acknowledge the rep's rejection (and its reason); nothing is re-proposed."""
    because = f' Your reason: "{_short(reason, 200)}".' if reason else ""
    return f"Understood — I did not {action(role)}; you rejected the proposal.{because} Nothing was changed."


def preferences_lines(data: Any, label: Callable[[str], str]) -> list[str]:
    """Preferences as ``- Label: value`` lines (whatever shape the tool returns)."""
    prefs = data.get("preferences", data) if isinstance(data, dict) else data
    if not isinstance(prefs, dict):
        return [f"- {_short(prefs, 300)}"]
    lines = []
    for key, value in prefs.items():
        if key in ("status", "audit_id"):
            continue
        lines.append(f"- {label(key)}: {_short(value if value not in (None, '') else 'not set', 300)}")
    return lines
