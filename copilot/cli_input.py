"""Checks of a terminal command's arguments (pure): what ``--rep``, ``--thread`` and a question
must be before anything is opened, so a bad argument gets a clear message and touches nothing."""

from __future__ import annotations

import re

from copilot.errors import InvalidInput

# Every id ``new_thread_id`` ever made (``secrets.token_urlsafe``): anything else names no
# thread, and is refused before it reaches the database (NUL, for one, cannot be stored).
_THREAD_ID = re.compile(r"[A-Za-z0-9_-]{22,200}")


def _check_text(what: str, text: str) -> None:
    """Refuse text the database, the identity provider and the terminal cannot all carry."""
    if "\x00" in text:
        raise InvalidInput(f"{what} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # Unpaired surrogates: how Python hands over command-line bytes that are not UTF-8.
        raise InvalidInput(f"{what} is not valid UTF-8 text") from exc


def check_rep(rep: str) -> None:
    """``--rep``: a non-empty handle or AAD object id (whether it exists, only sign-in knows)."""
    _check_text("--rep", rep)
    if not rep.strip():
        raise InvalidInput("--rep is empty: give a rep's handle or AAD object id")


def check_thread(thread: str | None) -> None:
    """``--thread``: the shape of an id the copilot made (``--thread=-abc…`` for one starting with -)."""
    if thread is None:
        return
    _check_text("--thread", thread)
    if not _THREAD_ID.fullmatch(thread):
        raise InvalidInput(
            f"--thread {thread[:60]!r} is not a conversation thread id "
            "(ids are 32 letters, digits, - and _, as printed by `ask`)"
        )


def check_question(question: str) -> None:
    """The question of ``ask``: non-empty text."""
    _check_text("the question", question)
    if not question.strip():
        raise InvalidInput('the question is empty: ask something, e.g. "my deals closing this quarter"')
