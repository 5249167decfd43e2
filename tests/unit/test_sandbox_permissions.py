"""The sandbox CRM's permission rules, as pure functions."""

from __future__ import annotations

from typing import Any

from sandbox import permissions as perms
from sandbox.directory import CONTOSO, FABRIKAM, User, find_user


def user(handle: str) -> User:
    found = find_user(handle)
    assert found is not None
    return found


def account(owner: str, territory: str, tenant: str = CONTOSO.id) -> dict[str, Any]:
    return {"id": "acc-x", "tenant_id": tenant, "owner_id": owner, "territory": territory}


def test_rep_reads_own_account():
    assert perms.can_read_account(user("alex"), account("u-alex", "East"), set())


def test_rep_reads_account_in_own_territory():
    assert perms.can_read_account(user("alex"), account("u-megan", "West"), set())


def test_rep_cannot_read_unshared_account_in_another_territory():
    assert not perms.can_read_account(user("alex"), account("u-diego", "East"), set())


def test_rep_reads_account_explicitly_shared_with_them():
    assert perms.can_read_account(user("alex"), account("u-diego", "East"), {"u-alex"})


def test_manager_reads_accounts_owned_by_reports():
    assert perms.can_read_account(user("nestor"), account("u-diego", "East"), set())


def test_nobody_reads_another_tenants_account_even_when_shared():
    foreign = account("u-priya", "West", tenant=FABRIKAM.id)
    assert not perms.can_read_account(user("alex"), foreign, {"u-alex"})
    assert not perms.can_read_account(user("nestor"), account("u-priya", "North", tenant=FABRIKAM.id), set())


def test_denial_is_not_found_across_tenants_and_permission_denied_within():
    assert perms.denial(user("alex"), FABRIKAM.id, allowed=False) == "not_found"
    assert perms.denial(user("alex"), FABRIKAM.id, allowed=True) == "not_found"
    assert perms.denial(user("alex"), None, allowed=True) == "not_found"
    assert perms.denial(user("alex"), CONTOSO.id, allowed=False) == "permission_denied"
    assert perms.denial(user("alex"), CONTOSO.id, allowed=True) is None


def test_rep_reads_opportunity_they_own_on_an_unreadable_account():
    opp = {"tenant_id": CONTOSO.id, "owner_id": "u-alex"}
    assert perms.can_read_opportunity(user("alex"), opp, account_readable=False)


def test_opportunity_is_readable_through_its_account():
    opp = {"tenant_id": CONTOSO.id, "owner_id": "u-megan"}
    assert perms.can_read_opportunity(user("alex"), opp, account_readable=True)
    assert not perms.can_read_opportunity(user("diego"), opp, account_readable=False)


def test_only_owner_or_owners_manager_can_update_opportunity():
    assert perms.can_update_opportunity(user("alex"), "u-alex")
    assert perms.can_update_opportunity(user("nestor"), "u-alex")
    assert not perms.can_update_opportunity(user("megan"), "u-alex")
    assert not perms.can_update_opportunity(user("taylor"), "u-alex")


def test_commission_is_visible_to_managers_only():
    assert "commission" in perms.visible_opportunity_fields(user("nestor"))
    assert "commission" not in perms.visible_opportunity_fields(user("alex"))
    assert "amount" in perms.visible_opportunity_fields(user("alex"))


def test_only_managers_may_change_probability():
    assert perms.writable_opportunity_fields(user("alex")) == perms.WRITABLE_OPPORTUNITY_FIELDS_REP
    assert {"stage", "close_date", "amount", "next_step"} == perms.WRITABLE_OPPORTUNITY_FIELDS_REP
    assert "probability" in perms.writable_opportunity_fields(user("nestor"))
    assert "owner_id" not in perms.writable_opportunity_fields(user("nestor"))


def test_activity_visibility_follows_its_regarding_records():
    alex = user("alex")
    assert perms.can_read_activity(alex, CONTOSO.id, account_readable=True, opportunity_readable=False)
    assert perms.can_read_activity(alex, CONTOSO.id, account_readable=False, opportunity_readable=True)
    assert not perms.can_read_activity(alex, CONTOSO.id, account_readable=False, opportunity_readable=False)
    assert not perms.can_read_activity(alex, FABRIKAM.id, account_readable=True, opportunity_readable=True)


def test_creating_an_activity_needs_read_access_on_every_regarding_record():
    alex = user("alex")
    assert perms.can_create_activity(alex, True, None)
    assert perms.can_create_activity(alex, True, True)
    assert not perms.can_create_activity(alex, True, False)
    assert not perms.can_create_activity(alex, None, None)


def test_only_owner_or_owners_manager_can_void_activity():
    assert perms.can_void_activity(user("alex"), "u-alex")
    assert perms.can_void_activity(user("nestor"), "u-alex")
    assert not perms.can_void_activity(user("megan"), "u-alex")
    assert not perms.can_void_activity(user("taylor"), "u-alex")
