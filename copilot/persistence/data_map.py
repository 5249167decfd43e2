"""The data map: which tables hold a rep's data, and which rows expire, declared by each layer.

Each layer that ships tables (:data:`~copilot.persistence.migrations.SCHEMA_PACKAGES`)
also ships ``sql/data_map.json`` next to its migrations: for every one of its tables,
how a rep's rows are found (by tenant + rep columns, or by a column naming one of the
rep's threads), what an export leaves out (secrets such as an encrypted token), and which
column makes a row expired. The files are located by package name with
:mod:`importlib.resources`, exactly like the migrations, so ``python -m copilot data`` and
``retention`` reach the bot's and the Functions app's tables without importing their code
(``copilot/`` never imports the layers above it).

A map is data crossing a boundary, so it is validated here: identifiers must be plain SQL
names, and every table of the migrated schema must be either mapped or listed under
``not_rep_data`` with the reason (tested against a real database), so a new table cannot
silently escape an export or a deletion.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from typing import Annotated, Literal

from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from copilot.errors import MigrationError
from copilot.persistence.migrations import SCHEMA_PACKAGES

DATA_MAP_FILE = "data_map.json"

Identifier = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]{0,62}$")]
"""A plain, lower-case SQL name: safe to quote as an identifier, never free SQL."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RepColumns(_Strict):
    """The rep's rows are those whose ``tenant`` and ``rep`` columns name the rep."""

    kind: Literal["rep"] = "rep"
    tenant: Identifier
    rep: Identifier


class ThreadColumn(_Strict):
    """The rep's rows are those whose ``thread`` column names a thread the rep owns."""

    kind: Literal["thread"] = "thread"
    thread: Identifier


Match = Annotated[RepColumns | ThreadColumn, Field(discriminator="kind")]


class MappedTable(_Strict):
    """One table holding rep data."""

    table: Identifier
    holds: str = Field(min_length=1)
    """What a row is, in a phrase (shown in the docs' data map and in ``--dry-run``)."""
    match: tuple[Match, ...] = Field(min_length=1)
    """How the rep's rows are found; a row matching any of them is the rep's."""
    omit_on_export: tuple[Identifier, ...] = ()
    """Columns an export leaves out (secrets that are not the rep's to read, e.g. ciphertext)."""
    expires: Identifier | None = None
    """A timestamp column: rows whose value has passed are removed by retention."""


class LayerDataMap(_Strict):
    """One layer's ``sql/data_map.json``."""

    group: Identifier
    """The table group: exported and deleted in one transaction, counted together."""
    tables: tuple[MappedTable, ...]
    """Export order (parents first); deletion runs in reverse (children first)."""
    not_rep_data: dict[Identifier, str] = {}
    """This layer's other tables, each with why it holds no rep data to export or delete."""


def load_data_maps(packages: Sequence[str] = SCHEMA_PACKAGES) -> tuple[LayerDataMap, ...]:
    """Every layer's data map, in the order of ``packages`` (the copilot's first)."""
    maps: list[LayerDataMap] = []
    for package in packages:
        try:
            entry = resources.files(package) / "sql" / DATA_MAP_FILE
        except ModuleNotFoundError as exc:
            raise MigrationError(f"the data map's package {package!r} is not installed") from exc
        if not entry.is_file():
            raise MigrationError(f"the package {package!r} ships no sql/{DATA_MAP_FILE}")
        try:
            maps.append(LayerDataMap.model_validate(json.loads(entry.read_text(encoding="utf-8"))))
        except (ValueError, ValidationError) as exc:
            raise MigrationError(f"{package}/sql/{DATA_MAP_FILE} is not a valid data map: {exc}") from exc
    groups = [m.group for m in maps]
    if len(set(groups)) != len(groups):
        raise MigrationError(f"two data maps name the same table group: {groups}")
    return tuple(maps)


def rep_predicate(table: MappedTable, *, tenant: str | None) -> sql.Composed:
    """``WHERE`` clause (without the keyword) selecting the rep's rows of ``table``.

    Takes the named parameters ``rep`` and, when ``tenant`` is given, ``tenant``; a thread
    match selects the threads the rep owns (the copilot's ``threads`` table).
    """
    owner = sql.SQL("owner_aad_id = %(rep)s") + (
        sql.SQL(" AND tenant_id = %(tenant)s") if tenant is not None else sql.SQL("")
    )
    parts: list[sql.Composable] = []
    for match in table.match:
        if isinstance(match, RepColumns):
            clause = sql.SQL("{} = %(rep)s").format(sql.Identifier(match.rep))
            if tenant is not None:
                clause += sql.SQL(" AND {} = %(tenant)s").format(sql.Identifier(match.tenant))
            parts.append(sql.SQL("(") + clause + sql.SQL(")"))
        else:
            parts.append(
                sql.SQL("{} IN (SELECT thread_id FROM threads WHERE ").format(sql.Identifier(match.thread))
                + owner
                + sql.SQL(")")
            )
    return sql.SQL(" OR ").join(parts)


def rep_params(rep: str, tenant: str | None) -> dict[str, str]:
    """The parameters :func:`rep_predicate`'s clause takes."""
    return {"rep": rep} if tenant is None else {"rep": rep, "tenant": tenant}
