"""The rep a turn runs for: tenant, Entra object id and access claims, nothing secret."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RepIdentity:
    """An authenticated rep. Thread ownership and audit rows are keyed on these fields."""

    tenant_id: str
    aad_object_id: str
    name: str = ""
    username: str = ""
    groups: tuple[str, ...] = field(default=(), compare=False)
    """Group claims of the rep's token (``groups``): what restricted knowledge is matched on."""
    roles: tuple[str, ...] = field(default=(), compare=False)
    """App-role claims (``roles``), e.g. ``manager``."""
    territories: tuple[str, ...] = field(default=(), compare=False)
    """Sales territories (the optional ``territories`` claim)."""
