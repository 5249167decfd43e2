"""The write tools' argument schemas bound what a rep may type into an edit."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from copilot.tools.schemas import MAX_AMOUNT, UpdateOpportunityArgs


@pytest.mark.parametrize(
    "amount", [float("inf"), float("-inf"), float("nan"), json.loads("1e400"), MAX_AMOUNT * 10, -1]
)
def test_an_amount_that_is_not_a_finite_number_within_the_crm_range_is_refused(amount):
    with pytest.raises(ValidationError, match="amount"):
        UpdateOpportunityArgs(opportunity_id="opp-1", amount=amount)


@pytest.mark.parametrize("amount", [0, 1, 125000.5, MAX_AMOUNT])
def test_amounts_within_the_crm_range_are_accepted(amount):
    assert UpdateOpportunityArgs(opportunity_id="opp-1", amount=amount).amount == amount
