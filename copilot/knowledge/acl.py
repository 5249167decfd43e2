"""Who may read a document, and who is asking (pure)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, field_validator

from copilot.identity import RepIdentity


def _normalised(values: Iterable[str]) -> list[str]:
    return sorted({v.strip().lower() for v in values if v.strip()})


class _Access(BaseModel):
    """Tenant, groups, roles and territories, the values an ACL and a reader are compared on
    (lists trimmed, lower-cased, sorted, without duplicates)."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    groups: list[str] = []
    roles: list[str] = []
    territories: list[str] = []

    @field_validator("groups", "roles", "territories")
    @classmethod
    def _lower(cls, values: list[str]) -> list[str]:
        return _normalised(values)


class Acl(_Access):
    """A document's access list. Empty lists do not restrict; a non-empty one must overlap
    the reader's values. The tenant always has to match."""

    @field_validator("tenant_id")
    @classmethod
    def _tenant(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an ACL needs a tenant")
        return value.strip()


class Reader(_Access):
    """The rep a search runs for, as far as access goes: from their identity (token claims)."""

    @classmethod
    def of(cls, identity: RepIdentity) -> Reader:
        """The reader an authenticated rep is."""
        return cls(
            tenant_id=identity.tenant_id,
            groups=list(identity.groups),
            roles=list(identity.roles),
            territories=list(identity.territories),
        )


def parse_acl(tenant_id: str, specs: Iterable[str]) -> Acl:
    """``--acl role:manager --acl territory:West --acl group:sales`` into an :class:`Acl`."""
    values: dict[str, list[str]] = {"group": [], "role": [], "territory": []}
    for spec in specs:
        kind, sep, value = spec.partition(":")
        kind = kind.strip().lower().removesuffix("s")
        if kind == "territorie":
            kind = "territory"
        if not sep or kind not in values or not value.strip():
            raise ValueError(f"an ACL entry is group:NAME, role:NAME or territory:NAME, not {spec[:60]!r}")
        values[kind].extend(v for v in value.split(",") if v.strip())
    return Acl(
        tenant_id=tenant_id,
        groups=values["group"],
        roles=values["role"],
        territories=values["territory"],
    )
