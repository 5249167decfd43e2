"""Local development sign-in: a cached rep is signed in again before the token expires."""

from __future__ import annotations

import time

import jwt
import pytest

from bot import rep_tokens
from copilot.settings import Settings


def _token(exp: int) -> str:
    claims = {"tid": "t", "oid": "o", "name": "Alex", "exp": exp}
    return jwt.encode(claims, "k" * 32, algorithm="HS256")


async def test_a_cached_sign_in_is_reused_until_it_nears_expiry(monkeypatch: pytest.MonkeyPatch):
    issued: list[str] = []
    lifetimes = iter([3600, 60, 3600])

    async def fake_sign_in(settings: Settings, username: str) -> str:
        token = _token(int(time.time()) + next(lifetimes))
        issued.append(token)
        return token

    monkeypatch.setattr(rep_tokens, "dev_sign_in", fake_sign_in)
    reps = rep_tokens.DevRepTokens(Settings())

    first = await reps.rep_for("t", "o")
    again = await reps.rep_for("t", "o")
    assert first is again
    assert len(issued) == 1

    reps._cache.clear()
    short = await reps.rep_for("t", "o")  # a token with only a minute left
    renewed = await reps.rep_for("t", "o")
    assert renewed is not short
    assert len(issued) == 3
