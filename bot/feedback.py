"""Feedback on answers: Teams' 👍 / 👎 (with an optional comment), parsed and stored per answer.

Teams sends an ``invoke`` named ``message/submitAction`` whose value is
``{"actionName": "feedback", "actionValue": {"reaction": "like" | "dislike", "feedback":
"{\\"feedbackText\\": \\"...\\"}"}}`` and whose ``replyToId`` is the answer's message id.
:func:`parse_feedback` reads it (the Agents Playground sends the comment as plain text);
:func:`record_answer` remembers which message was which thread's answer when it is sent,
and :func:`record_feedback` stores each feedback with that answer's thread (and its run id,
once the runner exposes one: the hook for sending feedback to LangSmith later).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.conversations import Pool
from copilot.identity import RepIdentity
from copilot.tracing.runs import Rating

FEEDBACK_INVOKE = "message/submitAction"
FEEDBACK_ACTION = "feedback"
MAX_COMMENT = 4000
"""Longer comments are refused (the table has the same bound)."""


class InvalidFeedback(ValueError):
    """A feedback invoke this bot cannot read; ``message`` says why (safe to show)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _ActionValue(BaseModel):
    model_config = ConfigDict(extra="ignore")

    reaction: Rating
    feedback: str | dict[str, Any] | None = None


class _Submit(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    action_name: Literal["feedback"] = Field(alias="actionName")
    action_value: _ActionValue = Field(alias="actionValue")


@dataclass(frozen=True)
class Feedback:
    """One rep's feedback on one answer."""

    rating: Rating
    comment: str | None


def _comment(raw: str | dict[str, Any] | None) -> str | None:
    """Teams: a JSON string ``{"feedbackText": ...}``; the Playground: the text itself."""
    value: Any = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
    if isinstance(value, dict):
        value = value.get("feedbackText")
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidFeedback("The feedback comment must be text.")
    text = value.strip()
    if len(text) > MAX_COMMENT:
        raise InvalidFeedback(f"The feedback comment is longer than {MAX_COMMENT} characters.")
    return text or None


def parse_feedback(value: Any) -> Feedback:
    """The feedback in a ``message/submitAction`` invoke's value; :class:`InvalidFeedback` if none."""
    if not isinstance(value, dict):
        raise InvalidFeedback("The feedback is missing: expected actionName and actionValue.")
    try:
        submit = _Submit.model_validate(value)
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "value"
        raise InvalidFeedback(
            f"The feedback is not valid ({where}): expected actionName 'feedback' and a reaction "
            "of 'like' or 'dislike'."
        ) from exc
    return Feedback(submit.action_value.reaction, _comment(submit.action_value.feedback))


# --- storage ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredFeedback:
    """A feedback as stored: the answer it is about, who gave it, and what they said."""

    id: int
    conversation_id: str
    activity_id: str | None
    thread_id: str | None
    tenant_id: str
    aad_object_id: str
    rating: Rating
    comment: str | None
    run_id: str | None
    received_at: datetime


async def record_answer(
    pool: Pool,
    *,
    conversation_id: str,
    message_id: str,
    thread_id: str,
    identity: RepIdentity,
    also_known_as: Iterable[str | None] = (),
    run_id: str | None = None,
) -> None:
    """Remember that message ``message_id`` is ``thread_id``'s answer to this rep.

    ``also_known_as``: other ids Teams may name it by (the stream the answer closed).
    """
    async with pool.connection() as conn:
        for activity_id in dict.fromkeys(a for a in (message_id, *also_known_as) if a):
            await conn.execute(
                """
                INSERT INTO answers
                    (conversation_id, activity_id, message_id, thread_id, tenant_id, aad_object_id, run_id)
                VALUES (%s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (conversation_id, activity_id) DO NOTHING
                """,
                (
                    conversation_id,
                    activity_id,
                    message_id,
                    thread_id,
                    identity.tenant_id,
                    identity.aad_object_id,
                    run_id,
                ),
            )


_ANSWER_BY_ID = """
SELECT message_id, thread_id, run_id, tenant_id FROM answers WHERE conversation_id = %s AND activity_id = %s
"""
# The Agents Playground's feedback invoke names no message (Teams' carries replyToId) and no
# tenant: then the feedback is about the latest answer the rep got in this conversation.
_LATEST_ANSWER = """
SELECT message_id, thread_id, run_id, tenant_id FROM answers
 WHERE conversation_id = %s AND aad_object_id = %s AND (%s = '' OR tenant_id = %s)
 ORDER BY sent_at DESC, activity_id = message_id DESC LIMIT 1
"""


async def record_feedback(
    pool: Pool,
    *,
    conversation_id: str,
    activity_id: str | None,
    rater: RepIdentity,
    feedback: Feedback,
) -> StoredFeedback:
    """Store one feedback with the answer it is about (found by message id, else the latest).

    Stored under the answer message's own id (also when Teams named the stream it closed).
    Feedback on a message the bot did not record as an answer is kept too, without a thread.
    """
    async with pool.connection() as conn:
        if activity_id:
            cur = await conn.execute(_ANSWER_BY_ID, (conversation_id, activity_id))
        else:
            cur = await conn.execute(
                _LATEST_ANSWER, (conversation_id, rater.aad_object_id, rater.tenant_id, rater.tenant_id)
            )
        answer = await cur.fetchone()
        cur = await conn.execute(
            """
            INSERT INTO answer_feedback
                (conversation_id, activity_id, thread_id, tenant_id, aad_object_id, rating, comment, run_id)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
            RETURNING *
            """,
            (
                conversation_id,
                answer["message_id"] if answer else activity_id,
                answer["thread_id"] if answer else None,
                rater.tenant_id or (answer["tenant_id"] if answer else ""),
                rater.aad_object_id,
                feedback.rating,
                feedback.comment,
                answer["run_id"] if answer else None,
            ),
        )
        row = await cur.fetchone()
    assert row is not None
    return StoredFeedback(**row)


async def feedback_for(
    pool: Pool, conversation_id: str, activity_id: str | None = None
) -> list[StoredFeedback]:
    """The feedback given in a conversation (on one answer if ``activity_id``), oldest first."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT * FROM answer_feedback
             WHERE conversation_id = %s AND (%s::text IS NULL OR activity_id = %s)
             ORDER BY id
            """,
            (conversation_id, activity_id, activity_id),
        )
        rows = await cur.fetchall()
    return [StoredFeedback(**row) for row in rows]
