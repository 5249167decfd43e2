"""The points a rep asks a draft to make, read from their message and addressed to the contact."""

from __future__ import annotations

import pytest

from offline_model.intents import parse_draft


@pytest.mark.parametrize(
    ("asked", "points"),
    [
        (
            "draft a follow-up to Sarah Chen at Acme: thank her for confirming budget, say the proposal "
            "comes by the 15th, and ask her about the pilot timeline",
            (
                "Thank you for confirming budget.",
                "The proposal comes by the 15th.",
                "Could you tell me about the pilot timeline?",
            ),
        ),
        (
            "write Maria Gonzalez at Acme saying we can start the pilot in January and that her team gets a discount",
            ("We can start the pilot in January.", "Your team gets a discount."),
        ),
        ("draft a follow-up to Sarah Chen at Acme thanking her for the demo", ("Thank you for the demo.",)),
        (
            "draft a follow up email to Tom Becker at Acme about the pilot, let him know the contract is ready",
            ("The contract is ready.",),
        ),
    ],
)
def test_the_reps_points_become_the_drafts_sentences_to_the_contact(
    asked: str, points: tuple[str, ...]
) -> None:
    assert parse_draft(asked).points == points


def test_a_draft_with_only_a_topic_has_no_points_and_keeps_its_topic() -> None:
    spec = parse_draft("draft a follow-up email to Dana at Vandelay about the pricing discussion")
    assert spec.points == ()
    assert spec.topic == "pricing discussion"
