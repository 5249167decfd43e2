"""The rep a turn runs for: tenant and Entra object id, nothing secret."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RepIdentity:
    """An authenticated rep. Thread ownership and audit rows are keyed on these fields."""

    tenant_id: str
    aad_object_id: str
    name: str = ""
    username: str = ""
