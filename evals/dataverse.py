"""The ``dataverse`` profile's datasets: the generator's items, with every CRM record id as the
sandbox's Dataverse face names it, read from that face.

The generator reads the seeded organisation once (:func:`evals.generate.read_world`, the
sandbox's own CRM tools); :func:`read_dataverse_ids` then signs the same users in for the
organisation's Dataverse face and reads, through the Web API with each one's own token (the
copilot's :class:`~copilot.crm.dataverse_reads.DataverseReads`), the accounts, contacts, open
opportunities and activities they see. Every record the items name must be there, under the GUID
``sandbox/dataverse/ids.py`` gives it and with the same name (or subject), read by a user who
saw it in the first read; anything else stops the generation. :func:`on_dataverse` rewrites the
items with those GUIDs, and the reads they expect with the Dataverse MCP server's read tools.

What stays as it was: meeting ids (Graph's), knowledge chunk ids, and an item's setup (planted
record text is written with the sandbox's own CRM tools as the rep, a CRM user's own edit that
shows on the Dataverse face; its text names the GUID of the deal it tries to change).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from copilot.crm import reference
from copilot.crm.connector import reads as crm_reads
from copilot.crm.dataverse_reads import DataverseReads
from copilot.errors import CrmCallError
from evals.dataset import BriefCase, EvalItem, GenerationConfig
from evals.environment import EvalEnvironment
from sandbox.dataverse.ids import guid_for

Progress = Callable[[str], None]

REFERENCE_READS = reference.READ_TOOLS
"""The reference CRM's read tools, as the generator names expected reads (the connector's list)."""
DATAVERSE_READS = ("read_query", "search_data")
"""The Dataverse MCP server's tools that read rows: any of them is the right read on this profile."""


@dataclass
class _Named:
    kind: str
    name: str
    readers: set[str] = field(default_factory=set)


def _world_records(world: Any) -> dict[str, _Named]:
    """Every CRM record the generator read: its kind, name (or subject) and who read it."""
    found: dict[str, _Named] = {}

    def add(kind: str, record: dict[str, Any], reader: str, label: str = "name") -> None:
        ident = str(record["id"])
        entry = found.setdefault(ident, _Named(kind, str(record.get(label) or "")))
        entry.readers.add(reader)

    def account(acc: Any, reader: str) -> None:
        add("account", acc.data, reader)
        for opp in acc.opportunities:
            add("opportunity", opp, reader)
        for contact in acc.contacts:
            add("contact", contact, reader)
        for activity in acc.activities:
            add("activity", activity, reader, "subject")

    for view in world.reps:
        for acc in view.accounts:
            account(acc, view.handle)
        for deals in [view.open_deals, *view.pipeline.values()]:
            for opp in deals:
                add("opportunity", opp, view.handle)
    for outsider in world.outsiders:
        account(outsider.account, outsider.handle)
    return found


@dataclass
class _Seen:
    """What one user's Dataverse reads returned: GUID → name (or subject)."""

    rows: dict[str, str] = field(default_factory=dict)


async def _read_as(reads: DataverseReads) -> _Seen:
    seen = _Seen()
    for account in await reads.accounts():
        guid = str(account["id"])
        seen.rows[guid] = str(account["name"])
        for contact in await reads.contacts(guid):
            seen.rows[str(contact["id"])] = str(contact["name"])
        for opp in await reads.open_opportunities(account_id=guid):
            seen.rows[str(opp["id"])] = str(opp["name"])
        for activity in await reads.activities(account_id=guid, limit=10_000):
            seen.rows[str(activity["id"])] = str(activity["subject"])
    return seen


async def read_dataverse_ids(
    env: EvalEnvironment, world: Any, config: GenerationConfig, progress: Progress
) -> dict[str, str]:
    """Each record id of ``world`` → its GUID, as the Dataverse face returns it to a user who read
    the record (a closed deal, which the copilot's reads do not list, is read by its GUID)."""
    records = _world_records(world)
    readers = sorted({r for entry in records.values() for r in entry.readers})
    mapping: dict[str, str] = {}
    problems: list[str] = []
    for handle in readers:
        progress(f"eval generate: reading the Dataverse face as {handle}")
        user = await env.sign_in(handle, profile="dataverse")
        async with AsyncExitStack() as stack:
            reads = crm_reads(stack, env.settings(profile="dataverse"), user.broker)
            assert isinstance(reads, DataverseReads)
            seen = await _read_as(reads)
            for ident, entry in records.items():
                if handle not in entry.readers or ident in mapping:
                    continue
                guid = guid_for(entry.kind, ident)
                name = seen.rows.get(guid)
                if name is None and entry.kind == "opportunity":
                    try:
                        name = str((await reads.record("opportunity", guid)).get("name") or "")
                    except CrmCallError:
                        name = None
                if name is None:
                    problems.append(f"{entry.kind} {ident} ({guid}) not read by {handle}")
                elif name != entry.name:
                    problems.append(f"{entry.kind} {ident} ({guid}) is {name!r} there, {entry.name!r} here")
                else:
                    mapping[ident] = guid
    if problems:
        raise RuntimeError(
            "the Dataverse face does not hold what the CRM tools read: " + "; ".join(problems[:8])
        )
    progress(f"eval generate: {len(mapping)} records read on the Dataverse face, each under its GUID")
    return mapping


def _tools(groups: list[list[str]]) -> list[list[str]]:
    out: list[list[str]] = []
    for group in groups:
        mapped = list(
            dict.fromkeys(DATAVERSE_READS if name in REFERENCE_READS else (name,) for name in group)
        )
        names = [name for names in mapped for name in names]
        if names not in out:
            out.append(names)
    return out


def _rewrite(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, list):
        return [_rewrite(v, ids) for v in value]
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, child in value.items():
            if key == "setup":
                result[key] = [_setup(step, ids) for step in child]
            elif key == "tools" and isinstance(child, list):
                result[key] = _tools(child)
            else:
                result[key] = _rewrite(child, ids)
        return result
    return value


def _setup(step: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """Written with the sandbox's own tools (reference ids); its text names the GUIDs."""
    args = dict(step["args"])
    if isinstance(args.get("notes"), str):
        for ident in sorted(ids, key=len, reverse=True):
            args["notes"] = args["notes"].replace(ident, ids[ident])
    return {**step, "args": args}


def on_dataverse(items: Sequence[EvalItem | BriefCase], ids: dict[str, str]) -> list[EvalItem | BriefCase]:
    """``items`` with every record id the generator read as its Dataverse GUID, and the expected
    reads as the Dataverse MCP server's read tools (the copilot's own tools keep their names)."""
    out: list[EvalItem | BriefCase] = []
    for item in items:
        data = _rewrite(item.model_dump(mode="json", exclude_defaults=True), ids)
        out.append(type(item).model_validate(data))
    return out


_REFERENCE_ID = re.compile(r'"((?:acc|act|con|opp)-[0-9A-Za-z_-]+)"')
"""A CRM record id as the sandbox's own tools name it (account, activity, contact, deal)."""


def unmapped(items: Iterable[EvalItem | BriefCase]) -> list[str]:
    """CRM record ids the items still name as the sandbox's own tools do (none once
    :func:`on_dataverse` has run with every record the items name; a setup is left out)."""
    text = " ".join(
        i.model_dump_json(exclude={"setup"}) if isinstance(i, EvalItem) else i.model_dump_json()
        for i in items
    )
    return sorted(set(_REFERENCE_ID.findall(text)))
