"""Races: concurrent decisions on one approval, and other people editing the record meanwhile.

Two kinds of run alternate, with a seeded RNG choosing the details:

* **Concurrent resumes.** One proposal (any write tool) is decided by 2-4 resumes at
  once, each in its own :class:`CopilotService` (its own pool, agent and checkpointer
  connection, as separate processes would be): all approve, all send the same edit,
  each sends a different edit, or some approve while others reject. Exactly one write
  and one audit row result (none if a rejection won); the written arguments are ones a
  decision asked for; every other resume gets the stored result or a clear
  :class:`InvalidDecision`; a decision that was written is never also recorded as a
  rejection; approving again afterwards writes nothing.
* **Concurrent edits.** A rep (the owner, or the owner's manager) proposes an
  opportunity update; the other of the two edits the same record through the CRM with
  the version they just read, before the approval, during it or after it, or through
  their own copilot approval at the same moment. The rep's write lands only over the
  version the rep reviewed (else it is a conflict); replaying the successful writes in
  version order over the reviewed record gives exactly the final record, so nobody's
  change is ever silently overwritten.

A third test races the approval delegation writes (``delegate_approvals``,
``revoke_delegation``), whose backend is the copilot's own store, under a pinned clock:

* **One grant decided at once** by 2-4 resumes (two clicks, two instances): all approve, or
  some approve while others reject. At most one grant is stored, with one audit row, and it
  is the delegation's one live grant; every resume gets the one write or a clear
  :class:`InvalidDecision`, never an error outcome.
* **Two grants to the same colleague at once** (two conversations): each is stored once and
  exactly one is live afterwards (a new grant replaces the live one).
* **One revoke decided at once** (approve, or approve and reject): the live grant ends once.
* **Two revokes at once** (two conversations): the grant ends exactly once; each rep's
  approval ends ``done`` (one ended it, the other finds it already ended), never an error.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from bot import brief_store
from bot.posting_settings import BotPostingSettings
from copilot.clock import Clock
from copilot.errors import InvalidDecision
from copilot.identity import RepIdentity
from copilot.persistence.database import connect
from copilot.runner import CopilotService
from copilot.tools.preferences import Preferences, apply_update, load_preferences
from copilot.tools.schemas import UpdatePreferencesArgs
from copilot.turns import Proposal, TurnResult
from tests.adversarial.counts import Tally, count, soak
from tests.adversarial.harness import (
    WRITE_TOOLS,
    audit_rows,
    canon,
    drain_output,
    export,
    make_nonce,
    normalized,
)
from tests.adversarial.profiles import Profile, crm_id, suite_name
from tests.support.copilot_env import Rep, service, sign_in
from tests.support.moments import WEDNESDAY_AFTERNOON, SteppingClock
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

SUITE = "races"
RUNS: dict[Profile, int] = {"reference": count(20, 500), "dataverse": count(10, 500)}
DELEGATION_RUNS = count(12, 300)
SEED = int(os.environ.get("COPILOT_ADVERSARIAL_SEED", "20261201"))
RESUMERS = 4
PLAN_MARK = "<<propose "
END_MARK = " >>"
OPPORTUNITY_FIELDS = ("stage", "close_date", "amount", "next_step", "probability")
CLOSED = {"Closed Won": 100, "Closed Lost": 0}


@pytest.fixture(scope="module", autouse=True)
def _seed_data(sandbox: SandboxProcess) -> Iterator[None]:
    """This module rewrites CRM records: start from the seed and leave the seed behind."""
    drain_output(sandbox)
    sandbox.admin("POST", "/admin/reset")
    yield
    sandbox.admin("POST", "/admin/reset")


class ProposingModel(BaseChatModel):
    """Proposes the calls written in the rep's question, then answers (stateless, so any
    service can continue any thread)."""

    @property
    def _llm_type(self) -> str:
        return "proposing"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ProposingModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        asked = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        text = str(messages[asked].content) if asked >= 0 else ""
        start = text.find(PLAN_MARK)
        proposed = any(isinstance(m, AIMessage) and m.tool_calls for m in messages[asked + 1 :])
        if start == -1 or proposed:
            message = AIMessage(content="Done.")
        else:
            plan = json.loads(text[start + len(PLAN_MARK) : text.index(END_MARK, start)])
            message = AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": c["name"],
                        "args": c["args"],
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "tool_call",
                    }
                    for c in plan
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def propose(tool: str, **args: Any) -> str:
    return f"Please do this. {PLAN_MARK}{json.dumps([{'name': tool, 'args': args}])}{END_MARK}"


@dataclass
class Env:
    settings: Any
    sandbox: SandboxProcess
    services: list[CopilotService]
    reps: dict[str, Rep]
    opportunities: list[str]
    contacts: list[str]
    accounts: list[str]
    profile: Profile = "reference"
    """The CRM profile: the lists above hold sandbox ids; proposals name records as it does."""

    def crm(self, kind: str, sandbox_id: str) -> str:
        return crm_id(self.profile, kind, sandbox_id)


@asynccontextmanager
async def environment(
    settings: Any, sandbox: SandboxProcess, profile: Profile = "reference", clock: Clock | None = None
) -> AsyncIterator[Env]:
    state = export(sandbox)
    opportunities = [
        o["id"]
        for o in state["opportunities"]
        if o["owner_id"] == "u-alex" and not str(o["stage"]).startswith("Closed")
    ]
    accounts = sorted({a["id"] for a in state["accounts"] if a["owner_id"] == "u-alex"})
    contacts = [c["id"] for c in state["contacts"] if c["account_id"] in accounts and c["email"]]
    reps = {handle: await sign_in(settings, handle) for handle in ("alex", "nestor")}
    async with AsyncExitStack() as stack:
        services = [
            await stack.enter_async_context(service(settings, ProposingModel(), clock=clock))
            for _ in range(RESUMERS + 1)
        ]
        for svc in services:
            # As the Teams bot wires it: the brief and digest settings, kept with alex's 1:1 chat.
            svc.posting = BotPostingSettings(svc.pool, 60)
        alex = reps["alex"].identity
        await brief_store.record_chat(services[0].pool, alex, {"conversation": {"id": "conv-alex"}}, None)
        yield Env(settings, sandbox, services, reps, opportunities, contacts, accounts, profile)


async def _rejections(settings: Any, thread_id: str) -> list[str]:
    async with connect(settings) as conn:
        cur = await conn.execute("SELECT tool_call_id FROM rejections WHERE thread_id = %s", (thread_id,))
        return [str(row["tool_call_id"]) for row in await cur.fetchall()]


# --- (a) concurrent resumes of one approval ----------------------------------------------------


DELEGATION_TOOLS = ("delegate_approvals", "revoke_delegation")
"""The writes whose backend is the approval delegation table: raced in (c) below."""

RACED_TOOLS = tuple(t for t in WRITE_TOOLS if t != "undo_write" and t not in DELEGATION_TOOLS)
"""The writes raced here against the CRM. ``undo_write`` needs an executed write to reverse and
has nothing to edit; that it runs once is proven in ``tests/integration/test_undo.py`` (undo
twice refused, its audit link unique). The delegation writes are raced in (c)."""


def _proposal_args(tool: str, rng: random.Random, env: Env, nonce: str) -> dict[str, Any]:
    if tool == "log_activity":
        return {
            "type": "call",
            "subject": f"Race {nonce}",
            "notes": "Concurrent",
            "account_id": env.crm("account", rng.choice(env.accounts)),
        }
    if tool == "update_opportunity":
        return {
            "opportunity_id": env.crm("opportunity", rng.choice(env.opportunities)),
            "next_step": f"Race {nonce}",
        }
    if tool == "draft_followup_email":
        return {
            "contact_id": env.crm("contact", rng.choice(env.contacts)),
            "subject": f"Race {nonce}",
            "body": "Concurrent",
        }
    if tool == "change_briefs_and_digest":
        return {"digest_time": f"{rng.randint(5, 11):02d}:{rng.choice(['00', '15', '30', '45'])}"}
    return {"followup_cadence_days": rng.randint(2, 40)}


STORE_TOOLS = ("update_preferences", "change_briefs_and_digest")
"""Writes to a setting (the same row rewritten), not records: a second execution could not be
seen in what is stored, so their exactly-once is read from the audit log alone."""


async def _stored(env: Env, rep: Rep, tool: str) -> dict[str, Any]:
    """What a store write changes, as it stands: the drafting preferences or the digest settings."""
    if tool == "change_briefs_and_digest":
        now = await brief_store.preferences(env.services[0].pool, rep.identity)
        return {"digest": now.digest_enabled, "digest_time": f"{now.digest_time:%H:%M}"}
    return (await load_preferences(env.services[0].store, rep.identity)).model_dump()


def _edit(tool: str, i: int, nonce: str) -> dict[str, Any]:
    if tool == "change_briefs_and_digest":
        return {"digest_time": f"{13 + i:02d}:05"}
    if tool == "update_preferences":
        return {"followup_cadence_days": 50 + i}
    if tool == "update_opportunity":
        return {"next_step": f"Edited {i} {nonce}"}
    return {"subject": f"Edited {i} {nonce}"}


def _written(
    tool: str,
    thread_id: str,
    before: dict[str, Any],
    after: dict[str, Any],
    prefs: tuple[dict[str, Any], dict[str, Any]],
    profile: Profile = "reference",
) -> list[dict[str, Any]]:
    """What reached the CRM / mailbox / store for this thread, as comparable field sets (record
    ids as the profile's CRM names them)."""
    if tool == "log_activity":
        old = {a["id"] for a in before["activities"]}
        return [
            {
                **{k: a[k] for k in ("type", "subject", "notes")},
                "account_id": crm_id(profile, "account", a["account_id"]),
            }
            for a in after["activities"]
            if a["id"] not in old and str(a["external_id"]).startswith(f"{thread_id}:")
        ]
    if tool == "draft_followup_email":
        old = {d["id"] for d in before["drafts"]}
        return [{"subject": d["subject"]} for d in after["drafts"] if d["id"] not in old]
    if tool == "update_opportunity":
        old_rows = {o["id"]: o for o in before["opportunities"]}
        writes = []
        for o in after["opportunities"]:
            delta = int(o["version"]) - int(old_rows[o["id"]]["version"])
            writes += [
                {"opportunity_id": crm_id(profile, "opportunity", o["id"]), "next_step": o["next_step"]}
            ] * delta
        return writes
    return [prefs[1]] if prefs[0] != prefs[1] else []


def _expected(tool: str, args: dict[str, Any], prefs_before: dict[str, Any]) -> dict[str, Any] | None:
    norm = normalized(tool, args)
    if norm is None:
        return None
    if tool == "log_activity":
        return {
            k: norm.get(k, "") if k == "notes" else norm.get(k)
            for k in ("type", "subject", "notes", "account_id")
        }
    if tool == "draft_followup_email":
        return {"subject": norm["subject"]}
    if tool == "update_opportunity":
        return {"opportunity_id": norm["opportunity_id"], "next_step": norm["next_step"]}
    if tool == "change_briefs_and_digest":
        return {"digest": True, "digest_time": norm["digest_time"]}
    start = Preferences.model_validate(prefs_before)
    return apply_update(start, UpdatePreferencesArgs.model_validate(norm)).model_dump()


async def concurrent_resumes(env: Env, rng: random.Random, run: int) -> tuple[str, list[str]]:
    tool = RACED_TOOLS[(run // 2) % len(RACED_TOOLS)]
    mode = rng.choice(["approve", "same edit", "different edits", "approve or reject"])
    n = rng.randint(2, RESUMERS)
    nonce = make_nonce(8)
    rep = env.reps["alex"]
    args = _proposal_args(tool, rng, env, nonce)
    asked = await env.services[0].run_turn(rep.identity, rep.broker, None, propose(tool, **args))
    name = f"{n} concurrent resumes ({mode}) of {tool}"
    if len(asked.proposals) != 1:
        return name, [f"expected one proposal, got {asked.proposals} ({asked.answer})"]
    proposal = asked.proposals[0]
    call_id = proposal.tool_call_id

    approve = {"tool_call_id": call_id, "type": "approve"}
    reject = {"tool_call_id": call_id, "type": "reject", "reason": "changed my mind"}
    decisions: list[dict[str, Any]] = []
    for i in range(n):
        if mode == "approve":
            decisions.append(approve)
        elif mode == "same edit":
            decisions.append({"tool_call_id": call_id, "type": "edit", "args": _edit(tool, 0, nonce)})
        elif mode == "different edits":
            decisions.append({"tool_call_id": call_id, "type": "edit", "args": _edit(tool, i, nonce)})
        else:  # at least one of each
            decisions.append(approve if i == 0 else reject if i == 1 else rng.choice([approve, reject]))
    rng.shuffle(decisions)
    before = export(env.sandbox)
    prefs_before = await _stored(env, rep, tool)
    # What a write may be: the proposal as shown (approve) or an edit of it that was sent.
    allowed = [
        canon(_expected(tool, {**proposal.args, **d.get("args", {})}, prefs_before))
        for d in decisions
        if d["type"] != "reject"
    ]
    delays = [rng.uniform(0, 0.03) for _ in decisions]

    async def decide(i: int) -> TurnResult | BaseException:
        await asyncio.sleep(delays[i])
        try:
            return await env.services[1 + i].decide(rep.identity, rep.broker, asked.thread_id, [decisions[i]])
        except Exception as exc:  # judged below: only InvalidDecision is an acceptable refusal
            return exc

    results = await asyncio.gather(*(decide(i) for i in range(n)))
    problems: list[str] = []
    for d, r in zip(decisions, results, strict=True):
        if isinstance(r, BaseException) and not isinstance(r, InvalidDecision):
            problems.append(f"a concurrent {d['type']} raised {type(r).__name__}: {r}")
    if not any(isinstance(r, TurnResult) for r in results):
        problems.append(f"no resume succeeded: {[type(r).__name__ for r in results]}")

    after = export(env.sandbox)
    prefs_after = await _stored(env, rep, tool)
    written = _written(tool, asked.thread_id, before, after, (prefs_before, prefs_after), env.profile)
    rows = await audit_rows(env.settings, asked.thread_id)
    rejected = await _rejections(env.settings, asked.thread_id)
    writers = [d for d in decisions if d["type"] != "reject"]
    if tool not in STORE_TOOLS and len(written) > 1:
        problems.append(f"{len(written)} writes for one approval: {written}")
    if len(rows) > 1:
        problems.append(f"{len(rows)} audit rows for one approval")
    if tool not in STORE_TOOLS and len(rows) != len(written):
        problems.append(f"{len(written)} write(s) but {len(rows)} audit row(s)")
    for w in written:
        if canon(w) not in allowed:
            problems.append(f"wrote {w}, which no decision asked for (allowed {allowed})")
    for row in rows:
        final = row.entry.edited_args if row.entry.edited_args is not None else row.entry.original_args
        if canon(_expected(tool, final, prefs_before)) not in allowed:
            problems.append(f"audit row records {final}, which no decision asked for")
    if rows and rejected:
        seen = [
            f"{d['type']} -> "
            + (
                type(r).__name__
                if isinstance(r, BaseException)
                else str([o["result"].get("status") for o in r.outcomes if o["tool_call_id"] == call_id])
            )
            for d, r in zip(decisions, results, strict=True)
        ]
        problems.append(f"the proposal was both written and recorded as rejected ({', '.join(seen)})")
    if len(rejected) > 1:
        problems.append(f"{len(rejected)} rejection rows for one proposal")
    if writers and len(writers) == len(decisions) and len(rows) != 1:
        problems.append(f"every decision approved but {len(rows)} audit rows")
    if not rows and not rejected:
        problems.append("the decisions left neither a write nor a rejection")
    audit_ids = {
        o["result"].get("audit_id")
        for r in results
        if isinstance(r, TurnResult)
        for o in r.outcomes
        if o["tool_call_id"] == call_id and o["result"].get("status") == "done"
    }
    if len(audit_ids) > 1:
        problems.append(f"resumes report different writes for one approval: audit ids {audit_ids}")

    # Approving once more (a late double click) never writes again.
    still = await env.services[0].pending(rep.identity, asked.thread_id)
    if any(p.tool_call_id == call_id for p in still.proposals):
        problems.append("the decided proposal is waiting for a decision again")
    with suppress(InvalidDecision):
        await env.services[0].decide(
            rep.identity, rep.broker, asked.thread_id, [{"tool_call_id": call_id, "type": "approve"}]
        )
    if len(await audit_rows(env.settings, asked.thread_id)) != len(rows):
        problems.append("approving again after the race wrote again")
    return name, problems


# --- (b) another user edits the record meanwhile --------------------------------------------


def _changes(rng: random.Random, tag: str, profile: Profile = "reference") -> dict[str, Any]:
    # Dataverse closes a deal by WinOpportunity, not by a stage, and a closed deal is read-only.
    stages = ["Qualification", "Proposal", "Negotiation"] + (["Closed Won"] if profile == "reference" else [])
    options = {
        "stage": rng.choice(stages),
        "next_step": f"{tag} next step",
        "amount": float(rng.randint(1, 900) * 1000),
        "close_date": f"2027-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
    }
    chosen = {k: v for k, v in options.items() if rng.random() < 0.5}
    return chosen or {"next_step": options["next_step"]}


def _apply(record: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = {**record, **changes}
    if changes.get("stage") in CLOSED:
        out["probability"] = CLOSED[changes["stage"]]
    return out


@dataclass
class Write:
    who: str
    expected_version: int
    version: int | None
    """The version the write produced (None: refused)."""
    changes: dict[str, Any]


def _other_edit(sandbox: SandboxProcess, who: str, opportunity: str, changes: dict[str, Any]) -> Write:
    current = sandbox.call(who, "get_opportunity", opportunity_id=opportunity)["structuredContent"]
    done = sandbox.call(
        who,
        "update_opportunity",
        opportunity_id=opportunity,
        expected_version=current["version"],
        changes=changes,
    )
    version = None if done["isError"] else int(done["structuredContent"]["opportunity"]["version"])
    return Write(who, int(current["version"]), version, changes)


async def concurrent_edits(env: Env, rng: random.Random, run: int) -> tuple[str, list[str]]:
    rep_handle, other = rng.choice([("alex", "nestor"), ("nestor", "alex")])
    timing = rng.choice(["before", "during", "during", "after", "copilot"])
    opportunity = rng.choice(env.opportunities)
    name = f"{rep_handle} approves while {other} edits {opportunity} ({timing})"
    rep = env.reps[rep_handle]
    tag = f"{rep_handle}-{make_nonce(6)}"
    # Always a real change (its own next step): a proposal of values the record already has
    # is answered "already has that value", not put to the rep.
    mine = {**_changes(rng, tag, env.profile), "next_step": f"{tag} next step"}
    theirs = _changes(rng, f"{other}-{make_nonce(6)}", env.profile)
    target = env.crm("opportunity", opportunity)
    asked = await env.services[0].run_turn(
        rep.identity, rep.broker, None, propose("update_opportunity", opportunity_id=target, **mine)
    )
    record = asked.proposals[0].record if len(asked.proposals) == 1 else None
    if record is None:
        return name, [f"expected one proposal with a record, got {asked.proposals} ({asked.answer})"]
    proposal = asked.proposals[0]
    reviewed = int(record.get("version") or 0)
    base = next(o for o in export(env.sandbox)["opportunities"] if o["id"] == opportunity)
    if int(base["version"]) != reviewed:
        return name, [f"the proposal shows version {reviewed}, the CRM holds {base['version']}"]
    approve = [{"tool_call_id": proposal.tool_call_id, "type": "approve"}]
    svc = env.services[1 + rng.randrange(RESUMERS)]

    others: list[Write] = []
    other_thread: str | None = None
    if timing == "before":
        others.append(await asyncio.to_thread(_other_edit, env.sandbox, other, opportunity, theirs))
        done = await svc.decide(rep.identity, rep.broker, asked.thread_id, approve)
    elif timing == "during":
        # A busy record: one to four edits by the other user land at random moments of the approval.
        edits = [
            (rng.uniform(0, 0.6), theirs if i == 0 else _changes(rng, f"{other}-{i}", env.profile))
            for i in range(rng.randint(1, 4))
        ]

        async def edit_later(delay: float, changes: dict[str, Any]) -> Write:
            await asyncio.sleep(delay)
            return await asyncio.to_thread(_other_edit, env.sandbox, other, opportunity, changes)

        done, edited = await asyncio.gather(
            svc.decide(rep.identity, rep.broker, asked.thread_id, approve),
            asyncio.gather(*(edit_later(d, c) for d, c in edits)),
        )
        others.extend(edited)
    elif timing == "after":
        done = await svc.decide(rep.identity, rep.broker, asked.thread_id, approve)
        others.append(await asyncio.to_thread(_other_edit, env.sandbox, other, opportunity, theirs))
    else:
        # The other user approves their own copilot's proposal on the same record at the same moment.
        them = env.reps[other]
        theirs_asked = await env.services[0].run_turn(
            them.identity,
            them.broker,
            None,
            propose("update_opportunity", opportunity_id=target, **theirs),
        )
        their_proposal = theirs_asked.proposals[0]
        other_thread = theirs_asked.thread_id
        their_svc = env.services[1 + (env.services.index(svc)) % RESUMERS]
        done, their_done = await asyncio.gather(
            svc.decide(rep.identity, rep.broker, asked.thread_id, approve),
            their_svc.decide(
                them.identity,
                them.broker,
                other_thread,
                [{"tool_call_id": their_proposal.tool_call_id, "type": "approve"}],
            ),
        )
        result: dict[str, Any] = next((o["result"] for o in their_done.outcomes), {})
        version = result.get("opportunity", {}).get("version") if result.get("status") == "done" else None
        others.append(Write(other, int((their_proposal.record or {}).get("version") or 0), version, theirs))

    problems: list[str] = []
    outcome = next((o["result"] for o in done.outcomes if o["tool_call_id"] == proposal.tool_call_id), None)
    status = (outcome or {}).get("status")
    if status not in ("done", "conflict"):
        problems.append(f"the rep's approval ended {status!r}: {outcome}")
    writes = list(others)
    if status == "done":
        assert outcome is not None
        shown = normalized("update_opportunity", proposal.args) or {}
        changes = {k: v for k, v in shown.items() if k != "opportunity_id"}
        writes.append(Write(rep_handle, reviewed, int(outcome["opportunity"]["version"]), changes))
        if int(outcome["opportunity"]["version"]) != reviewed + 1:
            problems.append(
                f"the rep's write produced version {outcome['opportunity']['version']}, not {reviewed + 1}: "
                "it was not made over the version the rep reviewed"
            )
    if timing == "before" and others[0].version is not None and status == "done":
        problems.append("the record changed before the approval, yet the rep's write went through")

    applied = sorted((w for w in writes if w.version is not None), key=lambda w: w.version or 0)
    final = next(o for o in export(env.sandbox)["opportunities"] if o["id"] == opportunity)
    replay = {k: base[k] for k in OPPORTUNITY_FIELDS}
    for position, w in enumerate(applied, start=1):
        if w.version != reviewed + position or w.expected_version != reviewed + position - 1:
            problems.append(f"{w.who}'s write went from version {w.expected_version} to {w.version}")
        replay = _apply(replay, w.changes)
    if int(final["version"]) != reviewed + len(applied):
        problems.append(
            f"final version {final['version']} after {len(applied)} successful writes over {reviewed}"
        )
    for k in OPPORTUNITY_FIELDS:
        if final[k] != replay[k]:
            problems.append(
                f"{k} is {final[k]!r}, but the successful writes in order give {replay[k]!r} (lost update)"
            )
    if not applied:
        problems.append("neither the rep's nor the other user's write landed")
    rows = await audit_rows(env.settings, asked.thread_id)
    if len(rows) != (status == "done"):
        problems.append(f"{len(rows)} audit rows for a {status} write")
    for r in rows:
        if r.entry.record_version_read != reviewed:
            problems.append(
                f"audit row says version {r.entry.record_version_read} was read, the rep reviewed {reviewed}"
            )
    return name, problems


# --- (c) approval delegations granted and ended at once ----------------------------------------


DELEGATE = "Megan Bowen"
DELEGATION_NOW = WEDNESDAY_AFTERNOON
"""The services' pinned clock for (c): a grant's window and liveness are read at this moment."""
DELEGATION_UNTIL = (DELEGATION_NOW + timedelta(days=9)).date().isoformat()
DELEGATION_MODES = (
    "grant: approve at once",
    "grant: approve or reject at once",
    "two grants at once",
    "revoke: approve at once",
    "revoke: approve or reject at once",
    "two revokes at once",
)


@dataclass(frozen=True)
class Grant:
    id: int
    delegate_aad_id: str
    live: bool


async def _grants(settings: Any, owner: RepIdentity) -> dict[int, Grant]:
    """Every grant the owner ever made, by id, live or not at :data:`DELEGATION_NOW`."""
    async with connect(settings) as conn:
        cur = await conn.execute(
            "SELECT id, delegate_aad_id, revoked_at, starts_at, ends_at FROM approval_delegations"
            " WHERE tenant_id = %s AND owner_aad_id = %s",
            (owner.tenant_id, owner.aad_object_id),
        )
        return {
            int(r["id"]): Grant(
                int(r["id"]),
                str(r["delegate_aad_id"]),
                r["revoked_at"] is None and r["starts_at"] <= DELEGATION_NOW < r["ends_at"],
            )
            for r in await cur.fetchall()
        }


def _live_to(grants: dict[int, Grant], delegate: str | None) -> list[int]:
    return sorted(
        g.id for g in grants.values() if g.live and (delegate is None or g.delegate_aad_id == delegate)
    )


async def _proposed(env: Env, rep: Rep, tool: str, **args: Any) -> tuple[str, Proposal] | str:
    """One proposal of ``tool`` in a new thread, or what went wrong."""
    asked = await env.services[0].run_turn(rep.identity, rep.broker, None, propose(tool, **args))
    if len(asked.proposals) != 1:
        return f"expected one {tool} proposal, got {asked.proposals} ({asked.answer})"
    return asked.thread_id, asked.proposals[0]


async def _ensure_live_grant(env: Env, rep: Rep) -> str | None:
    """Make sure the rep's delegation to :data:`DELEGATE` is live (granting it through a proposal
    approved once when it is not); returns what went wrong, if anything."""
    if _live_to(await _grants(env.settings, rep.identity), None):
        return None
    made = await _proposed(env, rep, "delegate_approvals", colleague=DELEGATE, until=DELEGATION_UNTIL)
    if isinstance(made, str):
        return made
    thread, proposal = made
    await env.services[0].decide(
        rep.identity, rep.broker, thread, [{"tool_call_id": proposal.tool_call_id, "type": "approve"}]
    )
    return (
        None if _live_to(await _grants(env.settings, rep.identity), None) else "setting up: no grant is live"
    )


def _outcome(result: TurnResult | BaseException, call_id: str) -> list[dict[str, Any]]:
    if isinstance(result, BaseException):
        return []
    return [o["result"] for o in result.outcomes if o["tool_call_id"] == call_id]


def _judge_outcomes(
    decisions: Sequence[dict[str, Any]], results: Sequence[TurnResult | BaseException]
) -> list[str]:
    """Every resume ends with one outcome of its proposal (or a clear refusal), never an error."""
    problems: list[str] = []
    for d, r in zip(decisions, results, strict=True):
        if isinstance(r, BaseException):
            if not isinstance(r, InvalidDecision):
                problems.append(f"a concurrent {d['type']} raised {type(r).__name__}: {r}")
            continue
        seen = _outcome(r, d["tool_call_id"])
        if d["type"] == "reject":
            continue  # a rejection has no write outcome (or the stored one, if a write won)
        if len(seen) != 1:
            problems.append(f"a concurrent approve got {len(seen)} outcomes of its proposal: {seen}")
        for outcome in seen:
            if outcome.get("status") != "done":
                problems.append(f"a concurrent approve was shown {outcome.get('status')!r}: {outcome}")
    if not any(isinstance(r, TurnResult) for r in results):
        problems.append(f"no resume succeeded: {[type(r).__name__ for r in results]}")
    audit_ids = {o.get("audit_id") for r in results for o in _outcome(r, decisions[0]["tool_call_id"])}
    if len({a for a in audit_ids if a is not None}) > 1:
        problems.append(f"resumes report different writes for one approval: audit ids {audit_ids}")
    return problems


async def _decide_at_once(
    env: Env, rep: Rep, rng: random.Random, rounds: Sequence[tuple[str, dict[str, Any]]]
) -> list[TurnResult | BaseException]:
    """Each (thread, decision) on its own service, at (nearly) the same moment."""
    delays = [rng.uniform(0, 0.03) for _ in rounds]

    async def decide(i: int) -> TurnResult | BaseException:
        await asyncio.sleep(delays[i])
        thread, decision = rounds[i]
        try:
            return await env.services[1 + i].decide(rep.identity, rep.broker, thread, [decision])
        except Exception as exc:  # judged by the caller: only InvalidDecision is a clear refusal
            return exc

    return list(await asyncio.gather(*(decide(i) for i in range(len(rounds)))))


def _one_proposal_decisions(call_id: str, mode: str, n: int, rng: random.Random) -> list[dict[str, Any]]:
    approve = {"tool_call_id": call_id, "type": "approve"}
    reject = {"tool_call_id": call_id, "type": "reject", "reason": "changed my mind"}
    if mode.endswith("approve at once"):
        return [approve] * n
    decisions = [approve, reject] + [rng.choice([approve, reject]) for _ in range(n - 2)]
    rng.shuffle(decisions)
    return decisions


async def delegation_races(env: Env, rng: random.Random, run: int) -> tuple[str, list[str]]:
    mode = DELEGATION_MODES[run % len(DELEGATION_MODES)]
    rep = env.reps["alex"]
    revoking = "revoke" in mode
    n = 2 if mode.startswith("two") else rng.randint(2, RESUMERS)
    name = f"{mode} ({n} resumes)"
    if revoking and (trouble := await _ensure_live_grant(env, rep)):
        return name, [trouble]
    tool, args = (
        ("revoke_delegation", {"colleague": rng.choice(["Megan", DELEGATE, "megan b"])})
        if revoking
        else ("delegate_approvals", {"colleague": DELEGATE, "until": DELEGATION_UNTIL})
    )
    proposals: list[tuple[str, Proposal]] = []
    for _ in range(2 if mode.startswith("two") else 1):
        made = await _proposed(env, rep, tool, **args)
        if isinstance(made, str):
            return name, [made]
        proposals.append(made)
    if mode.startswith("two"):
        rounds = [(thread, {"tool_call_id": p.tool_call_id, "type": "approve"}) for thread, p in proposals]
    else:
        [(thread, proposal)] = proposals
        rounds = [(thread, d) for d in _one_proposal_decisions(proposal.tool_call_id, mode, n, rng)]

    before = await _grants(env.settings, rep.identity)
    results = await _decide_at_once(env, rep, rng, rounds)
    after = await _grants(env.settings, rep.identity)

    problems: list[str] = []
    for thread, _ in proposals:
        decisions = [d for t, d in rounds if t == thread]
        problems += _judge_outcomes(
            decisions, [r for (t, _), r in zip(rounds, results, strict=True) if t == thread]
        )
    written = [len(await audit_rows(env.settings, thread)) for thread, _ in proposals]
    rejected = [len(await _rejections(env.settings, thread)) for thread, _ in proposals]
    for (thread, _), rows, rejections in zip(proposals, written, rejected, strict=True):
        if rows > 1:
            problems.append(f"{rows} audit rows for one approval")
        if rows and rejections:
            problems.append("the proposal was both written and recorded as rejected")
        if not rows and not rejections:
            problems.append("the decisions left neither a write nor a rejection")
        if all(d["type"] == "approve" for t, d in rounds if t == thread) and rows != 1:
            problems.append(f"every decision approved but {rows} audit rows")

    new = [g for g in after.values() if g.id not in before]
    ended = [g for g in after.values() if g.id in before and before[g.id].live and not g.live]
    live = _live_to(after, None)
    if revoking:
        if new:
            problems.append(f"a revoke stored {len(new)} grant(s)")
        if sum(written):
            if live:
                problems.append(f"the delegation was revoked, yet grants {live} are still live")
            if len(ended) != len(_live_to(before, None)):
                problems.append(f"{len(ended)} grant(s) ended of {_live_to(before, None)} live")
            # What each proposal's write reports it ended (its resumes all show the one write).
            reported = [
                sum(
                    {
                        o.get("audit_id"): int(o.get("ended", 0))
                        for (t, _), r in zip(rounds, results, strict=True)
                        if t == thread
                        for o in _outcome(r, p.tool_call_id)
                        if o.get("status") == "done"
                    }.values()
                )
                for thread, p in proposals
            ]
            if sum(reported) != len(ended):
                problems.append(f"the revokes report {reported} grant(s) ended, {len(ended)} did")
        elif ended:
            problems.append(f"every revoke was rejected, yet grants {[g.id for g in ended]} ended")
    else:
        if len(new) != sum(written):
            problems.append(f"{len(new)} grant(s) stored for {sum(written)} approved proposal(s)")
        if sum(written) and len(live) != 1:
            problems.append(f"{len(live)} live grants to {DELEGATE} after granting it: {live}")
        if sum(written) and live and max(g.id for g in new) != live[0]:
            problems.append(f"the live grant {live} is not the newest {[g.id for g in new]}")
        if not sum(written) and live != _live_to(before, None):
            problems.append(f"a rejected grant changed the live grants: {_live_to(before, None)} -> {live}")

    # Approving once more (a late double click) never writes again.
    for thread, p in proposals:
        with suppress(InvalidDecision):
            await env.services[0].decide(
                rep.identity, rep.broker, thread, [{"tool_call_id": p.tool_call_id, "type": "approve"}]
            )
    if [len(await audit_rows(env.settings, thread)) for thread, _ in proposals] != written:
        problems.append("approving again after the race wrote again")
    if await _grants(env.settings, rep.identity) != after:
        problems.append("approving again after the race changed the grants")
    return name, problems


async def test_concurrent_decisions_and_edits_never_write_twice_or_overwrite_anyone(
    profile_settings, crm_profile: Profile, sandbox
):
    # On both CRM profiles; on Dataverse the other user's edits still go through the CRM's own
    # tools (the same rows and row versions the Web API's ETags carry).
    rng = random.Random(SEED)
    tally = Tally(suite_name(SUITE, crm_profile))
    started = time.monotonic()
    async with environment(profile_settings, sandbox, crm_profile) as env:
        for run in range(RUNS[crm_profile]):
            kind = concurrent_resumes if run % 2 == 0 else concurrent_edits
            try:
                name, problems = await kind(env, rng, run)
            except Exception as exc:  # a crash is a failure of the run, not of the suite
                name, problems = f"run {run} ({kind.__name__})", [f"raised {type(exc).__name__}: {exc}"]
            if problems:
                print(f"{SUITE} run {run} ({name}) failed: {'; '.join(dict.fromkeys(problems))}")
            tally.record(not problems, f"run {run} ({name}): {'; '.join(dict.fromkeys(problems))}")
            if soak() and (run + 1) % 25 == 0:
                print(f"{tally.line()} after {time.monotonic() - started:.0f} s", flush=True)
    tally.assert_clean()


async def test_concurrent_delegation_decisions_grant_and_end_exactly_once(copilot_settings, sandbox):
    # The delegation table is the copilot's own, the same on either CRM profile: the reference one.
    assert set(WRITE_TOOLS) == {*RACED_TOOLS, *DELEGATION_TOOLS, "undo_write"}, "a write tool is not raced"
    rng = random.Random(SEED)
    tally = Tally(suite_name(f"{SUITE}-delegation", "reference"))
    async with environment(copilot_settings, sandbox, clock=SteppingClock(DELEGATION_NOW)) as env:
        for run in range(DELEGATION_RUNS):
            try:
                name, problems = await delegation_races(env, rng, run)
            except Exception as exc:  # a crash is a failure of the run, not of the suite
                name, problems = f"run {run}", [f"raised {type(exc).__name__}: {exc}"]
            if problems:
                print(f"{SUITE}-delegation run {run} ({name}) failed: {'; '.join(dict.fromkeys(problems))}")
            tally.record(not problems, f"run {run} ({name}): {'; '.join(dict.fromkeys(problems))}")
    tally.assert_clean()
