"""Focused answers: the sentence a question asks for, before (or instead of) the lists.

"3 open opportunities", "The next step on X [id] is …", "Sarah Chen [id] is the Chief
Financial Officer at X [id]", "The most recent activity on X [id] was a call on …". Each
sentence states values from tool results and cites the record they came from.
"""

from __future__ import annotations

from typing import Any, assert_never

from offline_model import compose as c
from offline_model.questions import Focus, Rank, title_exact, title_score
from offline_model.state import ToolResult
from offline_model.text import Period


def total(result: ToolResult) -> int:
    """How many records a list result says it has (its ``total`` when given)."""
    value = result.obj.get("total")
    return value if isinstance(value, int) and value >= len(result.items) else len(result.items)


def deal_fact(opp: dict[str, Any], field: Focus, *, again: bool = False) -> str:
    """One field of one deal, as a sentence citing it (``again``: the deal was just named: "It …")."""
    name = "It" if again else f"{opp.get('name', 'The opportunity')} {c.cite(opp.get('id'))}"
    match field:
        case "next_step":
            step = opp.get("next_step")
            if not step:
                return f"{name} has no next step recorded."
            return (
                f"Its next step is: {c.clean(step)}."
                if again
                else f"The next step on {name} is: {c.clean(step)}."
            )
        case "amount":
            if not isinstance(opp.get("amount"), int | float):
                return f"{name} has no amount recorded."
            return f"{name} is worth {c.money(opp.get('amount'), opp.get('currency'))}."
        case "close_date":
            when = opp.get("close_date")
            return f"{name} is expected to close on {when}." if when else f"{name} has no close date set."
        case "stage":
            return f"{name} is in {opp.get('stage') or 'no recorded'} stage."
        case "count" | "last_activity":
            return ""
        case _:
            assert_never(field)


def deal_facts(opp: dict[str, Any], fields: list[Focus]) -> str:
    """The asked fields of one deal, one sentence each, the deal named (and cited) first."""
    sentences = [deal_fact(opp, field, again=i > 0) for i, field in enumerate(fields)]
    return " ".join(s for s in sentences if s)


def field_words(fields: list[Focus]) -> str:
    """``next step and amount`` (how the asked fields read in a heading)."""
    names = {"next_step": "next step", "amount": "amount", "close_date": "close date", "stage": "stage"}
    words = [names[f] for f in fields if f in names]
    return " and ".join(words) if len(words) <= 2 else ", ".join(words[:-1]) + " and " + words[-1]


def of_kind(items: list[dict[str, Any]], kind: str | None) -> list[dict[str, Any]]:
    """The activities of one kind (call, meeting, email, task); all of them without one."""
    return items if kind is None else [a for a in items if str(a.get("type") or "").lower() == kind]


def latest_activity(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest activity of a list (by when it happened; voided ones skipped)."""
    live = [a for a in items if not a.get("voided")]
    return max(live, key=lambda a: str(a.get("occurred_at") or ""), default=None)


def latest_sentence(act: dict[str, Any], where: str, what: str = "activity") -> str:
    """``The most recent activity on X [id] was a call on 2026-05-04: "Subject" [act].``"""
    when = str(act.get("occurred_at") or "")[:10]
    kind = str(act.get("type") or "activity")
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return (
        f"The most recent {what}{where} was {article} {kind} on {when}: "
        f'"{c.clean(act.get("subject"), 100)}" {c.cite(act.get("id"))}.'
    )


def within(items: list[dict[str, Any]], period: Period | None) -> list[dict[str, Any]]:
    """The activities that happened inside ``period`` (all of them without one)."""
    if period is None:
        return items
    start = period.start.isoformat() if period.start else ""
    end = period.end.isoformat()
    return [a for a in items if start <= str(a.get("occurred_at") or "")[:10] <= end]


def fitting_contacts(items: list[dict[str, Any]], title_words: list[str]) -> list[dict[str, Any]]:
    """The contacts whose title fits the job asked for, best fit first (only the best)."""
    scored = [(title_score(title_words, str(x.get("title") or "")), x) for x in items]
    best = max((s for s, _ in scored), default=0)
    return [x for s, x in scored if s == best and s > 0]


def title_answer(
    account: str, contacts: list[dict[str, Any]], asked: list[str], listed: list[dict[str, Any]]
) -> str:
    """Who holds the job asked for at an account, the closest title when nobody holds it
    exactly, or that no contact's title fits (with who is there)."""
    words = " ".join(asked)
    if contacts and not all(title_exact(asked, str(x.get("title") or "")) for x in contacts):
        closest = ", ".join(f"{x.get('name')} {c.cite(x.get('id'))}, {x.get('title')}" for x in contacts)
        return f"No contact at {account} has the title '{words}'; the closest is {closest}."
    asked_text = words
    if len(contacts) == 1:
        x = contacts[0]
        return f"{x.get('name')} {c.cite(x.get('id'))} is the {x.get('title')} at {account}."
    if contacts:
        lines = [c.contact_line(x) for x in contacts]
        return f"{len(contacts)} contacts at {account} fit '{asked_text}':\n" + "\n".join(lines)
    if not listed:
        return f"No contacts recorded for {account}."
    lines = [c.contact_line(x) for x in listed[:10]]
    return (
        f"None of the contacts at {account} has a title like '{asked_text}'. Its contacts are:\n"
        + "\n".join(lines)
    )


def ranked(items: list[dict[str, Any]], rank: Rank) -> dict[str, Any] | None:
    """The deal with the largest (or smallest) amount; deals without one are not ranked."""
    priced = [o for o in items if isinstance(o.get("amount"), int | float)]
    pick = max if rank == "largest" else min
    return pick(priced, key=lambda o: float(o["amount"])) if priced else None


def field_values(records: list[dict[str, Any]], word: str) -> list[str]:
    """A field asked for by a word of the records' own, one sentence per record that has that
    key (none: no record shows it, and nothing else stands in for it)."""
    keys = {word, word.removesuffix("s")}
    found = [(r, r[k]) for r in records for k in r if k.lower() in keys and not isinstance(r[k], dict | list)]
    return [
        f"The {word} of {r.get('name', 'the record')} {c.cite(r.get('id'))} is {c.clean(v)}."
        if v not in (None, "")
        else f"{r.get('name', 'The record')} {c.cite(r.get('id'))} has no {word} recorded."
        for r, v in found
    ]
