"""Finding the records a request is about: ids the rep typed, the account, the opportunity."""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Any

from offline_model import compose as c
from offline_model.context import PlanContext, ReadCall
from offline_model.records import cited
from offline_model.roles import DETAIL_ARGUMENT, DETAIL_ROLES, Kind
from offline_model.state import Turn
from offline_model.steps import Step, answer
from offline_model.text import content_words


def check_typed_ids(ctx: PlanContext, kinds: tuple[Kind, ...]) -> Step | None:
    """Read the words that may be ids (as each kind that can be read by id), all in one message.

    An id a read returns is a known record on the next call; a word no read found is a
    word again (the model passes those as ``ruled_out`` to the parser).
    """
    calls: list[ReadCall] = [
        (DETAIL_ROLES[kind], {DETAIL_ARGUMENT[kind]: token})
        for token in ctx.req.unverified[:2]
        for kind in kinds
        if ctx.tools.has(DETAIL_ROLES[kind])
    ]
    if not calls:
        return None
    results = ctx.read_each(calls)
    return results if isinstance(results, Step) else None


def context_account(ctx: PlanContext) -> str | None:
    """The account the previous answer was about (for "their contacts", "log a call there").

    The first account it cited, else the account of the one deal it was about.
    """
    for record_id in cited(ctx.turn.previous_answer):
        if ctx.records.kind(record_id) == "account":
            return record_id
    deal = context_opportunity(ctx)
    return ctx.records.account_of(deal) if deal else None


def context_opportunity(ctx: PlanContext) -> str | None:
    """The one deal the previous answer was about ("and its next step?"); ``None`` if it
    cited none or several (then "its" is the account's)."""
    deals = [i for i in cited(ctx.turn.previous_answer) if ctx.records.kind(i) == "opportunity"]
    return deals[0] if len(deals) == 1 else None


def continues_previous(ctx: PlanContext) -> bool:
    """The request names no record of its own and points back at the previous answer's."""
    req = ctx.req
    named = req.account_queries or req.records or req.unverified
    # "my deals", "the team's pipeline" are the rep's own book, whatever came before.
    own_book = req.team or "pipeline" in req.intents or re.search(r"\b(my|mine|i|i'm|me)\b", req.text.lower())
    return (
        not named and not own_book and (req.refers_back or req.follow_up) and bool(ctx.turn.previous_answer)
    )


def has_account_reference(ctx: PlanContext) -> bool:
    """Whether the request names an account (by name or by id)."""
    return bool(ctx.req.account_queries or ctx.req.ids_of("account"))


def resolve_account(ctx: PlanContext, *, needs_account: bool) -> dict[str, Any] | Step:
    """The account the request names: an id, a search hit, or the previous answer's account."""
    ids = ctx.req.ids_of("account")
    queries = ctx.req.account_queries
    if not ids and not queries and (needs_account or ctx.req.refers_back):
        context = context_account(ctx)
        if context:
            ids = [context]
    if ids:
        if not ctx.tools.has("account_detail"):
            return {"id": ids[0], "name": ids[0]}
        result = ctx.read("account_detail", {"account_id": ids[0]})
        if isinstance(result, Step):
            return result
        if not result.ok:
            return answer(c.error_sentence(result, f"account {ids[0]}"))
        return result.obj
    if not queries:
        return answer("Which account do you mean? Tell me its name.")
    for query in queries[:3]:
        result = ctx.read("account_search", {"query": query}, "look up accounts")
        if isinstance(result, Step):
            return result
        if not result.ok:
            return answer(c.error_sentence(result, f"an account matching '{query}'"))
        # The CRM matches inside words ("right" is inside "Bright…"): a word not typed as a
        # name names only the accounts whose name it begins a word of.
        hits = [i for i in result.items if query not in ctx.req.tentative or names_match(query, i)]
        if hits:
            return pick_account(query, hits)
    return did_you_mean(ctx, queries[0])


def names_match(query: str, account: dict[str, Any]) -> bool:
    """Whether each word of ``query`` begins a word of the account's name."""
    name = re.findall(r"[a-z0-9]+", str(account.get("name", "")).lower())
    return all(any(n.startswith(q) for n in name) for q in re.findall(r"[a-z0-9]+", query.lower()))


def unmatched_words(turn: Turn, search: str | None) -> set[str]:
    """What this question searched for as account names that no visible account's name
    matches, even nearly: words, not names (lower case).

    Known only once the rep's accounts were listed (``did_you_mean``'s read): until then a
    query may still be a misspelt name.
    """
    calls = turn.all(search) if search else []
    listed = [c.result.items for c in calls if not c.args.get("query") and c.result and c.result.ok]
    if not listed:
        return set()
    return {
        query.lower()
        for call in calls
        if (query := str(call.args.get("query") or "")) and call.result is not None and call.result.ok
        if not any(names_match(query, i) for i in call.result.items) and not near_misses(query, listed[0])
    }


NEAR_MISS = 0.75
"""How alike a typed word and a word of an account's name must be to suggest the account."""


def did_you_mean(ctx: PlanContext, query: str) -> Step:
    """Nothing matched ``query``: suggest accounts the rep can see whose names are near it.

    The suggestions come from the rep's own search results (what the CRM lets them see),
    so they reveal nothing; and "none you can see" is all that is said otherwise, never
    that no such account exists.
    """
    none = f"I found no account matching '{query}' among the accounts you can see."
    result = ctx.read("account_search", {"query": ""}, "look up accounts")
    if isinstance(result, Step):
        return result
    if not result.ok:
        return answer(none)
    near = near_misses(query, result.items)
    if not near or len(near) > 3:
        return answer(none)
    options = " or ".join(f"{i.get('name')} {c.cite(i.get('id'))}" for i in near)
    return answer(f"{none} Did you mean {options}?")


def near_misses(query: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The accounts whose name has a word close to a word of ``query`` (a typo of it)."""
    typed = [w for w in content_words(query) if len(w) >= 3]
    return [
        item
        for item in items
        if any(
            SequenceMatcher(None, word, name_word).ratio() >= NEAR_MISS
            for word in typed
            for name_word in content_words(str(item.get("name", "")))
        )
    ]


def pick_account(query: str, items: list[dict[str, Any]]) -> dict[str, Any] | Step:
    """One hit, one exact name, or one name starting with the words asked for; else ask which."""
    q = query.lower()
    names = [(str(i.get("name", "")).lower(), i) for i in items]
    for hits in (
        items,
        [i for n, i in names if n == q],
        [i for n, i in names if n.startswith(q)],
    ):
        if len(hits) == 1:
            return hits[0]
    lines = [
        f"- {i.get('name')} {c.cite(i.get('id'))}" + (f" — {i['city']}" if i.get("city") else "")
        for i in items[:10]
    ]
    return answer(f"Several accounts match '{query}':\n" + "\n".join(lines) + "\nWhich one do you mean?")


def account_name(opp: dict[str, Any]) -> str:
    """The name of the account an opportunity belongs to ("" if the result does not say)."""
    account = opp.get("account")
    return str(account.get("name", "")) if isinstance(account, dict) else ""


DEAL_NEAR_MISS = 0.8
"""How alike a typed word and a word of a deal's name must be to count as naming it ("renwal")."""


def _matches(wanted: set[str], words: set[str]) -> int:
    exact = wanted & words
    near = {
        w
        for w in wanted - exact
        if len(w) >= 4
        and any(SequenceMatcher(None, w, n).ratio() >= DEAL_NEAR_MISS for n in words - exact if len(n) >= 4)
    }
    return len(exact) + len(near)


def choose_opportunity(
    ctx: PlanContext, account: dict[str, Any] | None, items: list[dict[str, Any]], *, must_choose: bool
) -> dict[str, Any] | Step | None:
    """The open opportunity the request names; asks which when it is ambiguous and one is needed."""
    account_words = content_words(str(account.get("name", ""))) if account else set()
    wanted = content_words(ctx.req.match_text or ctx.req.text) - account_words
    names = [
        content_words(str(o.get("name", ""))) - account_words - content_words(account_name(o)) for o in items
    ]
    deal_words = set().union(*names)
    for q in ctx.req.account_queries:
        # A word tried as an account name that names one of these deals is the deal's ("X — Support Plan").
        wanted -= content_words(q) - deal_words
    scored = []
    for opp, words in zip(items, names, strict=True):
        scored.append((_matches(wanted, words), opp))
    best = max((s for s, _ in scored), default=0)
    top = [o for s, o in scored if s == best and best > 0]
    if len(top) == 1:
        return top[0]
    if best == 0 and len(items) == 1:
        return items[0]
    if not must_choose:
        return None
    candidates = top or items
    where = f" at {account.get('name')} {c.cite(account.get('id'))}" if account else ""
    lines = [c.opportunity_line(o, with_account=account is None) for o in candidates[:10]]
    return answer(f"Which opportunity{where} do you mean?\n" + "\n".join(lines) + "\nTell me its name or id.")
