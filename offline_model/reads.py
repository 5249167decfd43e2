"""Read requests: an account's overview, deals, activity and contacts; the rep's book and pipeline.

Each plan reads everything it needs in one message, then composes the answer only from
the results.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from offline_model import compose as c
from offline_model import focus as f
from offline_model import knowledge as k
from offline_model.context import PlanContext, ReadCall
from offline_model.lookup import (
    choose_opportunity,
    context_account,
    context_opportunity,
    continues_previous,
    has_account_reference,
    resolve_account,
)
from offline_model.roles import ReadRole
from offline_model.state import ToolResult, as_dict
from offline_model.steps import Step, answer
from offline_model.text import Period, content_words, quarter_bounds


def plan_reads(ctx: PlanContext) -> Step:
    """The reads the request's intents need, then the answer."""
    intents = ctx.req.intents
    continues = continues_previous(ctx)
    deal = context_opportunity(ctx) if continues else None
    if deal and set(intents) <= {"opportunities", "overview"} and ctx.tools.has("opportunity_detail"):
        # "and its next step?" after an answer about one deal: that deal.
        return deal_reads(ctx, deal)
    # "what did we discuss with them?" continues the previous answer's account.
    follows_up = (
        (ctx.req.refers_back or continues)
        and context_account(ctx) is not None
        and (set(intents) <= {"overview", "contacts", "activities"} or continues)
    )
    if (
        has_account_reference(ctx)
        or follows_up
        or "overview" in intents
        or ("contacts" in intents and "pipeline" not in intents)
    ):
        return account_reads(ctx)
    return book_reads(ctx)


def preferences(ctx: PlanContext) -> Step:
    """The rep's drafting preferences."""
    result = ctx.read("preferences_read", {}, "read your preferences")
    if isinstance(result, Step):
        return result
    if not result.ok:
        return answer(c.error_sentence(result, "your preferences"))
    return answer(
        "Your drafting preferences:\n" + "\n".join(c.preferences_lines(result.data, ctx.tools.label))
    )


def opportunity_filters(ctx: PlanContext) -> dict[str, Any]:
    """The close-date window and stage the rep asked about, as opportunity-list arguments."""
    args: dict[str, Any] = {}
    period = ctx.req.period
    if period is not None:
        if period.start is not None:
            args["closing_after"] = period.start.isoformat()
        args["closing_before"] = period.end.isoformat()
    if ctx.req.stage:
        args["stage"] = ctx.req.stage
        if ctx.req.stage.startswith("Closed"):
            args["open_only"] = False
    return args


def deal_reads(ctx: PlanContext, opportunity_id: str) -> Step:
    """One deal read by id, and the fields asked of it (all of them when none was named)."""
    result = ctx.read("opportunity_detail", {"opportunity_id": opportunity_id})
    if isinstance(result, Step):
        return result
    if not result.ok:
        return answer(c.error_sentence(result, f"opportunity {opportunity_id}"))
    fields = ctx.req.deal_fields
    text = (
        f.deal_facts(result.obj, fields)
        if fields
        else c.opportunity_line(result.obj, with_account=True).removeprefix("- ")
    )
    guidance = k.playbook_for_deal(ctx, result.obj) if ctx.req.guidance else ""
    return guidance if isinstance(guidance, Step) else answer(text + guidance)


def account_reads(ctx: PlanContext) -> Step:
    """One account: the reads its intents need (in one message), then the composed answer."""
    intents = ctx.req.intents
    account = resolve_account(ctx, needs_account=True)
    if isinstance(account, Step):
        return account
    acc_id = str(account.get("id"))
    calls: list[ReadCall] = []
    if "overview" in intents:
        calls.append(("account_detail", {"account_id": acc_id}))
    if "overview" in intents or "opportunities" in intents:
        calls.append(("opportunity_list", {"account_id": acc_id, **opportunity_filters(ctx)}))
    if "activities" in intents:
        period = ctx.req.period
        since = {"since": period.start.isoformat()} if period and period.start else {}
        calls.append(("activity_list", {"account_id": acc_id, **since, "limit": 10}))
    elif "overview" in intents:
        calls.append(("activity_list", {"account_id": acc_id, "limit": 5}))
    if "contacts" in intents:
        calls.append(("contact_list", {"account_id": acc_id}))
    if not any(ctx.tools.has(role) for role, _ in calls):
        return ctx.help()
    results = ctx.read_all(calls)
    if isinstance(results, Step):
        return results
    guidance = _deal_guidance(ctx, account, results)
    if isinstance(guidance, Step):
        return guidance
    if "overview" in intents:
        named = named_deal(ctx, account, results.get("opportunity_list"))
        if named is not None:
            return answer(compose_deal(ctx, named, results.get("activity_list")) + guidance)
        return answer(compose_account(ctx, account, results) + guidance)
    return answer(compose_focused(ctx, account, results) + guidance)


def _deal_guidance(
    ctx: PlanContext, account: dict[str, Any], results: dict[ReadRole, ToolResult]
) -> str | Step:
    """For "what should I do next on <deal>?": the playbook of the deal's stage (or nothing)."""
    opps = results.get("opportunity_list")
    if not ctx.req.guidance or opps is None or not opps.ok or not opps.items:
        return ""
    chosen = choose_opportunity(ctx, account, opps.items, must_choose=False)
    if not isinstance(chosen, dict):
        # A deal named in full ("… on Lamna Logistics — Training Package") is that deal, even
        # when its name's words read as another account's.
        text = " ".join(ctx.req.text.lower().split())
        named = [o for o in opps.items if " ".join(str(o.get("name") or "").lower().split()) in text]
        chosen = named[0] if len(named) == 1 and named[0].get("name") else None
    return k.playbook_for_deal(ctx, chosen) if isinstance(chosen, dict) else ""


def named_deal(ctx: PlanContext, account: dict[str, Any], opps: ToolResult | None) -> dict[str, Any] | None:
    """The one deal of the account the question names by a word of its own ("how's the Vandelay
    renewal looking?"): the question is about that deal, not the whole account."""
    if opps is None or not opps.ok or not opps.items:
        return None
    chosen = choose_opportunity(ctx, account, opps.items, must_choose=False)
    if not isinstance(chosen, dict):
        return None
    account_words = content_words(str(account.get("name", "")))
    own = content_words(str(chosen.get("name", ""))) - account_words
    # Only a deal the rep's words name (not the only deal, picked for want of another).
    return chosen if own & content_words(ctx.req.match_text or ctx.req.text) else None


def compose_deal(ctx: PlanContext, deal: dict[str, Any], acts: ToolResult | None) -> str:
    """One deal: its line (a past-due close date flagged) and the recent activity about it."""
    lines = deal_lines([deal], ctx.today, with_account=True)
    lines[0] = lines[0].removeprefix("- ")
    about = [
        a
        for a in (acts.items if acts is not None and acts.ok else [])
        if isinstance(a.get("opportunity"), dict) and a["opportunity"].get("id") == deal.get("id")
    ]
    if about:
        lines += [
            "",
            "**Recent activity on this deal**",
            *(c.activity_line(a, with_notes=False) for a in about),
        ]
    return "\n".join(lines)


def activity_scope(period: Period | None) -> str:
    """`` last week (2026-04-27 to 2026-05-03)`` ("" without a period)."""
    if period is None:
        return ""
    if period.start is None:
        return f" until {period.end.isoformat()}"
    if period.start == period.end:
        return f" {period.label} ({period.start.isoformat()})"
    return f" {period.label} ({period.start.isoformat()} to {period.end.isoformat()})"


def compose_focused(ctx: PlanContext, account: dict[str, Any], results: dict[ReadRole, ToolResult]) -> str:
    """An answer to what was asked of one account: counts, one deal's fields, a job title, the
    latest activity; each list with how many it holds."""
    req = ctx.req
    failures = [r for r in results.values() if not r.ok]
    if results and len(failures) == len(results):
        return c.error_sentence(failures[0], f"account {account.get('name', '')}".strip())
    name = f"{account.get('name') or 'The account'} {c.cite(account.get('id'))}"
    blocks: list[list[str]] = []
    opps = results.get("opportunity_list")
    if opps is not None:
        blocks.append(_deals_block(ctx, account, name, opps))
    contacts = results.get("contact_list")
    if contacts is not None:
        if not contacts.ok:
            blocks.append([c.error_sentence(contacts, "the contacts")])
        elif req.title_words:
            fitting = f.fitting_contacts(contacts.items, req.title_words)
            blocks.append([f.title_answer(name, fitting, req.title_words, contacts.items)])
        elif not contacts.items:
            blocks.append([f"No contacts recorded for {name}."])
        else:
            count = c.plural(f.total(contacts), "contact")
            lines = [c.contact_line(x) for x in contacts.items]
            blocks.append([f"{name} has {count}:", *lines, *_more(contacts)])
    acts = results.get("activity_list")
    if acts is not None:
        blocks.append(
            _activities_block(req.period, "last_activity" in req.focus, name, acts, req.activity_type)
        )
    return "\n\n".join("\n".join(b) for b in blocks if b).strip()


def picked(ctx: PlanContext, opps: ToolResult, account: dict[str, Any] | None, name: str) -> list[str]:
    """The deal a superlative picks ("my biggest deal") or the question names, and a field
    asked of it by the records' own word ("commission"); of the rep's book without ``account``."""
    req = ctx.req
    book = account is None
    whose = ("Your team's" if req.team else "Your") if book else "The"
    deals, lead = opps.items, ""
    if req.rank:
        top = f.ranked(deals, req.rank)
        if top is None:
            return [
                f"None of these opportunities has an amount, so none is the {req.rank}.",
                *_lines(deals, book),
            ]
        shown = f" of the {len(deals)} shown" if c.more_note(opps) else ""
        lead = f"{whose} {req.rank} open opportunity{'' if book else f' at {name}'}{shown}"
        deals = [top]
    elif account is not None:
        chosen = choose_opportunity(ctx, account, deals, must_choose=False)
        deals = [chosen] if isinstance(chosen, dict) else deals
    one = deals[0] if len(deals) == 1 else None
    if req.asked_field:
        values = f.field_values([*deals, *([] if account is None else [account])], req.asked_field)
        if values:
            return [" ".join(values)]
        subject = (
            f"{one.get('name')} {c.cite(one.get('id'))}" if one else f"{whose.lower()} open opportunities"
        )
        subject += f", {lead[:1].lower()}{lead[1:]}" if lead else ("" if one or book else f" at {name}")
        if one is None:
            # The deals checked are cited, never listed: a refusal is followed by nothing else.
            subject += " " + c.cite(*[o.get("id") for o in deals])
        return [
            f"I can't see a {req.asked_field} field on {subject}: it isn't in the CRM data visible to you."
        ]
    if one is None:
        return _lines(deals, book)
    if req.deal_fields:
        return [
            f"{lead}: {f.deal_facts(one, req.deal_fields)}" if lead else f.deal_facts(one, req.deal_fields)
        ]
    return [f"{lead} is {c.opportunity_line(one, with_account=book).removeprefix('- ')}"]


def past_due(opp: dict[str, Any], today: dt.date) -> bool:
    """An open deal whose close date is before today (the service's clock, not the rep's PC)."""
    close = opp.get("close_date")
    stage = str(opp.get("stage") or "")
    if not isinstance(close, str) or stage.startswith("Closed"):
        return False
    try:
        return dt.date.fromisoformat(close[:10]) < today
    except ValueError:
        return False


def rollup(opps: ToolResult, today: dt.date) -> str:
    """`` worth USD 420,000 in total, USD 210,000 weighted by probability; 1 past its close
    date`` for a list of deals ("" when the amounts do not add up: several currencies)."""
    items = opps.items
    currency = c.common_currency(items)
    priced = [o for o in items if isinstance(o.get("amount"), int | float)]
    parts: list[str] = []
    if currency and priced:
        shown = " shown" if c.more_note(opps) else ""
        parts.append(f" worth {c.money(sum(float(o['amount']) for o in priced), currency)} in total{shown}")
        weighted = [o for o in priced if isinstance(o.get("probability"), int | float)]
        if len(weighted) == len(priced):
            value = sum(float(o["amount"]) * float(o["probability"]) / 100 for o in weighted)
            parts.append(f", {c.money(round(value, 2), currency)} weighted by probability")
    late = sum(1 for o in items if past_due(o, today))
    if late:
        parts.append(f"; {late} past {'its' if late == 1 else 'their'} close date")
    return "".join(parts)


def deal_lines(deals: list[dict[str, Any]], today: dt.date, *, with_account: bool) -> list[str]:
    """One line per deal, a past-due close date flagged."""
    return [
        c.opportunity_line(o, with_account=with_account) + (" — **past due**" if past_due(o, today) else "")
        for o in deals
    ]


def _lines(deals: list[dict[str, Any]], with_account: bool) -> list[str]:
    return [c.opportunity_line(o, with_account=with_account) for o in deals]


def _more(result: ToolResult) -> list[str]:
    note = c.more_note(result)
    return [note] if note else []


def _deals_block(ctx: PlanContext, account: dict[str, Any], name: str, opps: ToolResult) -> list[str]:
    req = ctx.req
    if not opps.ok:
        return [c.error_sentence(opps, "the opportunities")]
    scope = period_phrase(req.period)
    stage = f" in {req.stage}" if req.stage else ""
    kind = "opportunity" if req.stage and req.stage.startswith("Closed") else "open opportunity"
    if not opps.items:
        return [f"{name} has no {kind.replace('opportunity', 'opportunities')}{stage}{scope}."]
    if req.rank or req.asked_field:
        return picked(ctx, opps, account, name)
    fields = req.deal_fields
    if fields:
        chosen = choose_opportunity(ctx, account, opps.items, must_choose=False)
        if isinstance(chosen, dict):
            return [f.deal_facts(chosen, fields)]
    count = c.plural(f.total(opps), kind, kind.replace("opportunity", "opportunities"))
    head = f"{name} has {count}{stage}{scope}"
    currency = c.common_currency(opps.items)
    amounts = [o["amount"] for o in opps.items if isinstance(o.get("amount"), int | float)]
    if "amount" in fields and currency and amounts and not c.more_note(opps):
        head += f" worth {c.money(sum(amounts), currency)} in total"
    head += f"; the {f.field_words(fields)} of each:" if fields else rollup(opps, ctx.today) + ":"
    return [head, *deal_lines(opps.items, ctx.today, with_account=False), *_more(opps)]


def _activities_block(
    period: Period | None, latest_only: bool, name: str, acts: ToolResult, kind: str | None = None
) -> list[str]:
    if not acts.ok:
        return [c.error_sentence(acts, "the activities")]
    items = f.of_kind(f.within(acts.items, period), kind)
    scope = activity_scope(period)
    where = f" for {name}" if name else ""
    word, words = (kind, f"{kind}s") if kind else ("activity", "activities")
    if not items:
        return [f"No recorded {words}{where}{scope}."]
    if latest_only:
        latest = f.latest_activity(items)
        if latest is not None:
            return [f.latest_sentence(latest, f" with {name}" if name else "", word)]
    # The CRM's ``total`` counts what it matched: all of it, or everything since the period's
    # start (the read sends ``since``). When the page is newest first and the period dropped
    # none of it, nothing newer than the period exists, so that total is the period's count
    # even when the page shows only the newest ones.
    whole = kind is None and len(items) == len(acts.items) and (period is None or period.start is not None)
    count = c.plural(f.total(acts) if whole else len(items), word, words)
    lines = [c.activity_line(a, with_notes=True) for a in items]
    return [f"{count}{where}{scope}:", *lines, *(_more(acts) if whole else [])]


def compose_account(ctx: PlanContext, account: dict[str, Any], results: dict[ReadRole, ToolResult]) -> str:
    """An account's answer: header, roll-up, and a section per read."""
    failures = [r for r in results.values() if not r.ok]
    if results and len(failures) == len(results):
        return c.error_sentence(failures[0], f"account {account.get('name', '')}".strip())
    detail = results.get("account_detail")
    info = detail.obj if detail is not None and detail.ok else account
    opps = results.get("opportunity_list")
    acts = results.get("activity_list")
    contacts = results.get("contact_list")
    name = str(info.get("name") or account.get("name") or "the account")
    ref = c.cite(info.get("id") or account.get("id"))
    lines = [c.account_header(info)]
    if detail is not None and detail.ok:
        rollup = c.account_rollup(info, c.common_currency(opps.items) if opps else None)
        if rollup:
            lines.append(rollup)
    scope = period_phrase(ctx.req.period)
    opp_count = f" ({f.total(opps)})" if opps is not None and opps.ok and opps.items else ""
    lines += c.section(
        ("Open opportunities" if not ctx.req.stage else f"Opportunities in {ctx.req.stage}") + opp_count,
        opps,
        deal_lines(opps.items if opps else [], ctx.today, with_account=False),
        f"No open opportunities{scope} for {name} {ref}.",
        "the opportunities",
    )
    with_notes = "activities" in ctx.req.intents
    lines += c.section(
        "Recent activity",
        acts,
        [c.activity_line(a, with_notes=with_notes) for a in (acts.items if acts else [])],
        f"No recorded activities for {name} {ref}.",
        "the activities",
    )
    lines += c.section(
        "Contacts",
        contacts,
        [c.contact_line(x) for x in (contacts.items if contacts else [])],
        f"No contacts recorded for {name} {ref}.",
        "the contacts",
    )
    return "\n".join(lines).strip()


def period_phrase(period: Period | None) -> str:
    """`` closing this quarter (2026-04-01 to 2026-06-30)`` ("" without a period)."""
    if period is None:
        return ""
    if period.start is None:
        return f" closing by {period.end.isoformat()}"
    return f" closing {period.label} ({period.start.isoformat()} to {period.end.isoformat()})"


def book_reads(ctx: PlanContext) -> Step:
    """The rep's own book: deals by period/stage, pipeline summary, recent activity."""
    req = ctx.req
    intents = req.intents
    if "pipeline" in intents and req.period is None:
        # A pipeline is a period's pipeline: default to this quarter (the CRM's own
        # default), and say so, so the deal list and the totals cover the same window.
        start, end = quarter_bounds(ctx.today)
        req.period = Period(start, end, "this quarter")
    calls: list[ReadCall] = []
    if "pipeline" in intents or "opportunities" in intents:
        calls.append(("opportunity_list", {"owner": req.owner, **opportunity_filters(ctx)}))
    if "pipeline" in intents:
        summary: dict[str, Any] = {"scope": "team" if req.team else "mine"}
        if req.period is not None:
            if req.period.start is not None:
                summary["period_start"] = req.period.start.isoformat()
            summary["period_end"] = req.period.end.isoformat()
        calls.append(("pipeline", summary))
    if "activities" in intents:
        since = req.period.start if req.period and req.period.start else None
        calls.append(("activity_list", {**({"since": since.isoformat()} if since else {}), "limit": 10}))
    if not calls or not any(ctx.tools.has(role) for role, _ in calls):
        return ctx.help()
    results = ctx.read_all(calls)
    if isinstance(results, Step):
        return results
    return answer(compose_book(ctx, results))


def compose_book(ctx: PlanContext, results: dict[ReadRole, ToolResult]) -> str:
    """The book's answer: the deal list, the pipeline totals, recent activity."""
    req = ctx.req
    failures = [r for r in results.values() if not r.ok]
    if results and len(failures) == len(results):
        return c.error_sentence(failures[0], "those records")
    lines: list[str] = []
    whose = "Your team has" if req.team else ("You have" if req.owner == "me" else "I found")
    scope = period_phrase(req.period)
    stage = f" in {req.stage}" if req.stage else ""
    opps = results.get("opportunity_list")
    if opps is not None:
        if not opps.ok:
            lines.append(c.error_sentence(opps, "the opportunities"))
        elif not opps.items:
            lines.append(f"{whose} no open opportunities{stage}{scope}.")
        elif req.rank or req.asked_field:
            lines += picked(ctx, opps, None, "")
        else:
            total_value = opps.obj.get("total")
            total = total_value if isinstance(total_value, int) else len(opps.items)
            lines.append(
                f"{whose} {c.plural(total, 'open opportunity', 'open opportunities')}{stage}{scope}"
                + rollup(opps, ctx.today)
                + ":"
            )
            lines += deal_lines(opps.items, ctx.today, with_account=True)
            note = c.more_note(opps)
            if note:
                lines.append(note)
    summary = results.get("pipeline")
    if summary is not None:
        lines.append("")
        lines += pipeline_lines(summary, "team" if req.team else "mine")
    acts = results.get("activity_list")
    if acts is not None:
        lines.append("")
        block = _activities_block(req.period, "last_activity" in req.focus, "", acts, req.activity_type)
        lines += [block[0][:1].upper() + block[0][1:], *block[1:]]
    return "\n".join(lines).strip()


def pipeline_lines(summary: ToolResult, scope: str) -> list[str]:
    """The pipeline totals and by-stage counts, citing every opportunity they cover."""
    if not summary.ok:
        return [c.error_sentence(summary, "the pipeline summary")]
    data = summary.obj
    period = as_dict(data.get("period"))
    currency = data.get("currency")
    ids = [i for i in data.get("opportunity_ids", []) if isinstance(i, str)]
    span = f"{period.get('start')} to {period.get('end')}" if period else "the period"
    count = data.get("count", len(ids))
    if not count:
        return [f"**Pipeline ({scope}, {span})**: no open opportunities closing in this period."]
    head = (
        f"**Pipeline ({scope}, {span})**: {c.money(data.get('total_amount'), currency)} total, "
        f"{c.money(data.get('weighted_amount'), currency)} weighted, "
        f"{c.plural(int(count), 'open opportunity', 'open opportunities')} {c.cite(*ids)}"
    ).rstrip()
    lines = [head]
    for row in data.get("by_stage", []):
        if isinstance(row, dict) and row.get("count"):
            lines.append(f"- {row.get('stage')}: {row.get('count')} ({c.money(row.get('amount'), currency)})")
    return lines
