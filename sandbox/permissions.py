"""Who may see and change what in the sandbox CRM (pure functions, no I/O).

The rules mirror a typical Dynamics 365 / Salesforce setup: a rep reads their own
and their territory's accounts plus anything explicitly shared with them; a
manager reads what their reports own; only an owner or the owner's manager
changes a record. Tenant isolation comes first: across tenants a record does not
exist (``not_found``), so callers cannot probe for other tenants' ids.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from sandbox.directory import User, find_user

Denial = Literal["not_found", "permission_denied"]

OPPORTUNITY_FIELDS: frozenset[str] = frozenset(
    {
        "id",
        "tenant_id",
        "account_id",
        "name",
        "stage",
        "amount",
        "currency",
        "close_date",
        "probability",
        "next_step",
        "owner_id",
        "commission",
        "version",
        "created_at",
        "modified_at",
        "modified_by",
    }
)
# Compensation data is for managers only.
MANAGER_ONLY_OPPORTUNITY_FIELDS: frozenset[str] = frozenset({"commission"})
WRITABLE_OPPORTUNITY_FIELDS_REP: frozenset[str] = frozenset({"stage", "close_date", "amount", "next_step"})
WRITABLE_OPPORTUNITY_FIELDS_MANAGER: frozenset[str] = WRITABLE_OPPORTUNITY_FIELDS_REP | {"probability"}


def same_tenant(caller: User, tenant_id: str | None) -> bool:
    """Whether a record of ``tenant_id`` lives in the caller's tenant."""
    return tenant_id is not None and tenant_id == caller.tenant_id


def is_manager_of(caller: User, user_id: str | None) -> bool:
    """Whether the caller is the (direct) manager of ``user_id`` in the same tenant."""
    if user_id is None:
        return False
    user = find_user(user_id)
    return user is not None and user.manager_id == caller.id and user.tenant_id == caller.tenant_id


def denial(caller: User, tenant_id: str | None, allowed: bool) -> Denial | None:
    """The error code for a refused access: ``not_found`` across tenants, else ``permission_denied``."""
    if not same_tenant(caller, tenant_id):
        return "not_found"
    return None if allowed else "permission_denied"


def can_read_account(caller: User, account_row: Mapping[str, Any], shared_user_ids: Collection[str]) -> bool:
    """Owner, same territory, owner's manager, or an explicit share (always same tenant)."""
    if not same_tenant(caller, account_row.get("tenant_id")):
        return False
    owner_id = account_row.get("owner_id")
    return (
        owner_id == caller.id
        or (caller.territory is not None and account_row.get("territory") == caller.territory)
        or is_manager_of(caller, owner_id)
        or caller.id in shared_user_ids
    )


def can_read_opportunity(
    caller: User,
    opportunity_row: Mapping[str, Any],
    account_readable: bool,
    shared_user_ids: Collection[str] = (),
) -> bool:
    """Readable if the caller can read its account, owns it, manages its owner or it is shared."""
    if not same_tenant(caller, opportunity_row.get("tenant_id")):
        return False
    owner_id = opportunity_row.get("owner_id")
    return (
        account_readable
        or owner_id == caller.id
        or is_manager_of(caller, owner_id)
        or caller.id in shared_user_ids
    )


def can_update_opportunity(caller: User, opp_owner_id: str) -> bool:
    """Only the owner or the owner's manager, and only within the caller's tenant."""
    if opp_owner_id == caller.id:
        return True
    return is_manager_of(caller, opp_owner_id)


def can_edit_account(caller: User, account_owner_id: str) -> bool:
    """Same rule as opportunities: only the owner or the owner's manager changes an account."""
    return can_update_opportunity(caller, account_owner_id)


def visible_opportunity_fields(caller: User) -> frozenset[str]:
    """Opportunity fields the caller may see (commission only for managers)."""
    if caller.role == "manager":
        return OPPORTUNITY_FIELDS
    return OPPORTUNITY_FIELDS - MANAGER_ONLY_OPPORTUNITY_FIELDS


def writable_opportunity_fields(caller: User) -> frozenset[str]:
    """Opportunity fields the caller may change (managers may also set probability)."""
    if caller.role == "manager":
        return WRITABLE_OPPORTUNITY_FIELDS_MANAGER
    return WRITABLE_OPPORTUNITY_FIELDS_REP


def can_read_activity(
    caller: User, activity_tenant_id: str, account_readable: bool, opportunity_readable: bool
) -> bool:
    """Activities inherit visibility from what they are regarding (account or opportunity)."""
    return same_tenant(caller, activity_tenant_id) and (account_readable or opportunity_readable)


def can_create_activity(
    caller: User, account_readable: bool | None, opportunity_readable: bool | None
) -> bool:
    """Every regarding record given (``None`` = not given) must be readable; at least one is required."""
    given = [flag for flag in (account_readable, opportunity_readable) if flag is not None]
    return bool(given) and all(given)


def can_void_activity(caller: User, activity_owner_id: str) -> bool:
    """Only the activity's owner or the owner's manager."""
    return activity_owner_id == caller.id or is_manager_of(caller, activity_owner_id)
