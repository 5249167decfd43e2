"""Who exists in the sandbox: tenants, territories and users (pure data).

Shared by the CRM seed (record ownership, territories, managers) and the identity
provider (who can sign in, who has CRM access). Identifiers are fixed so that
tokens, tests and the Agents Playground user stay stable across resets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["rep", "manager"]


@dataclass(frozen=True)
class Tenant:
    id: str
    name: str
    domain: str


@dataclass(frozen=True)
class User:
    id: str
    """CRM user id (stable, what records reference as owner)."""
    handle: str
    name: str
    tenant_id: str
    role: Role
    territory: str | None
    manager_id: str | None
    aad_object_id: str
    email: str
    crm_access: bool = True
    """False = the CRM licence was revoked: the identity provider refuses CRM tokens."""


CONTOSO = Tenant(id="00000000-0000-0000-0000-000000000001", name="Contoso", domain="contoso.example")
FABRIKAM = Tenant(id="00000000-0000-0000-0000-000000000002", name="Fabrikam", domain="fabrikam.example")
TENANTS: tuple[Tenant, ...] = (CONTOSO, FABRIKAM)

# The Microsoft 365 Agents Playground signs its user in as "Alex Wilber" with this
# (deliberately odd-length) AAD object id; alex must be that user.
PLAYGROUND_AAD_OBJECT_ID = "00000000-0000-0000-0000-0000000000020"


def _oid(n: int) -> str:
    return f"aad00000-0000-4000-8000-{n:012d}"


USERS: tuple[User, ...] = (
    # Contoso: West (alex, megan) and East (diego, lidia) under Nestor.
    User(
        "u-nestor",
        "nestor",
        "Nestor Wilke",
        CONTOSO.id,
        "manager",
        None,
        None,
        _oid(1),
        "nestor@contoso.example",
    ),
    User(
        "u-alex",
        "alex",
        "Alex Wilber",
        CONTOSO.id,
        "rep",
        "West",
        "u-nestor",
        PLAYGROUND_AAD_OBJECT_ID,
        "alex@contoso.example",
    ),
    User(
        "u-megan",
        "megan",
        "Megan Bowen",
        CONTOSO.id,
        "rep",
        "West",
        "u-nestor",
        _oid(3),
        "megan@contoso.example",
    ),
    User(
        "u-diego",
        "diego",
        "Diego Siciliani",
        CONTOSO.id,
        "rep",
        "East",
        "u-nestor",
        _oid(4),
        "diego@contoso.example",
    ),
    User(
        "u-lidia",
        "lidia",
        "Lidia Holloway",
        CONTOSO.id,
        "rep",
        "East",
        "u-nestor",
        _oid(5),
        "lidia@contoso.example",
    ),
    User(
        "u-adele",
        "adele",
        "Adele Vance",
        CONTOSO.id,
        "rep",
        "West",
        "u-nestor",
        _oid(6),
        "adele@contoso.example",
        crm_access=False,
    ),
    # Fabrikam: North (priya, sam) and South (jordan) under Taylor.
    User(
        "u-taylor",
        "taylor",
        "Taylor Reed",
        FABRIKAM.id,
        "manager",
        None,
        None,
        _oid(11),
        "taylor@fabrikam.example",
    ),
    User(
        "u-priya",
        "priya",
        "Priya Raman",
        FABRIKAM.id,
        "rep",
        "North",
        "u-taylor",
        _oid(12),
        "priya@fabrikam.example",
    ),
    User(
        "u-sam",
        "sam",
        "Sam Okafor",
        FABRIKAM.id,
        "rep",
        "North",
        "u-taylor",
        _oid(13),
        "sam@fabrikam.example",
    ),
    User(
        "u-jordan",
        "jordan",
        "Jordan Blake",
        FABRIKAM.id,
        "rep",
        "South",
        "u-taylor",
        _oid(14),
        "jordan@fabrikam.example",
    ),
)


def find_user(ref: str) -> User | None:
    """A user by handle, CRM user id, AAD object id or email (case-insensitive)."""
    needle = ref.strip().lower()
    for user in USERS:
        if needle in (user.handle, user.id, user.aad_object_id.lower(), user.email):
            return user
    return None


def find_tenant(tenant_id: str) -> Tenant | None:
    """A tenant by id."""
    return next((t for t in TENANTS if t.id == tenant_id), None)


def reports_of(manager_id: str) -> tuple[User, ...]:
    """Users whose manager is ``manager_id`` (direct reports)."""
    return tuple(u for u in USERS if u.manager_id == manager_id)
