"""The turn queue's message: an authenticated activity, as the HTTP trigger accepted it.

The HTTP trigger validates the Bot Framework JWT and enqueues the activity with the
*result* of that validation (claims, audience, caller id), never the token itself. The
queue trigger rebuilds botbuilder's ``AuthenticateRequestResult`` from it, so the turn
runs exactly as if it had been processed in the request, and replies go out through the
Bot Connector with the bot's own app-only token.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.activity_input import InvalidActivity, validate_activity
from bot.runtime import activity_from_json, authenticated_request, claims_identity

if TYPE_CHECKING:  # botbuilder's types; bot/ builds the objects
    from botbuilder.schema import Activity
    from botframework.connector.auth import (
        AuthenticateRequestResult,
        BotFrameworkAuthentication,
        ClaimsIdentity,
    )


class InvalidEnvelope(ValueError):
    """A queue message that is not a turn envelope (it can never succeed: drop it)."""


@dataclass(frozen=True)
class TurnEnvelope:
    """One queued turn."""

    activity: dict[str, Any]
    """The activity exactly as the channel posted it (JSON, camelCase)."""
    claims: dict[str, Any]
    is_authenticated: bool
    authentication_type: str | None
    audience: str | None
    caller_id: str | None
    received_at: str

    @classmethod
    def accepted(cls, body: dict[str, Any], result: AuthenticateRequestResult) -> TurnEnvelope:
        """What the HTTP trigger enqueues for an authenticated activity."""
        identity = result.claims_identity
        return cls(
            activity=body,
            claims=dict(identity.claims or {}),
            is_authenticated=bool(identity.is_authenticated),
            authentication_type=identity.authentication_type,
            audience=result.audience,
            caller_id=result.caller_id,
            received_at=dt.datetime.now(dt.UTC).isoformat(),
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "activity": self.activity,
                "claims": self.claims,
                "is_authenticated": self.is_authenticated,
                "authentication_type": self.authentication_type,
                "audience": self.audience,
                "caller_id": self.caller_id,
                "received_at": self.received_at,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> TurnEnvelope:
        """Parse a queue message; :class:`InvalidEnvelope` if it is not one of ours."""
        try:
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidEnvelope(f"not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise InvalidEnvelope("not a JSON object")
        activity, claims = data.get("activity"), data.get("claims")
        if not isinstance(activity, dict) or not isinstance(claims, dict):
            raise InvalidEnvelope("'activity' and 'claims' must be objects")
        return cls(
            activity=activity,
            claims=claims,
            is_authenticated=bool(data.get("is_authenticated")),
            authentication_type=_optional_str(data.get("authentication_type")),
            audience=_optional_str(data.get("audience")),
            caller_id=_optional_str(data.get("caller_id")),
            received_at=str(data.get("received_at") or ""),
        )

    def to_activity(self) -> Activity:
        """The queued activity, checked exactly as the HTTP trigger checked it.

        A queue message is input too (anyone holding the storage key can write one): its
        activity must have the same shape, and its ``serviceUrl`` must be the one the
        recorded channel token was issued for, since replies go there with the bot's token.
        """
        try:
            shape = validate_activity(self.activity)
            activity = activity_from_json(self.activity, shape)
        except InvalidActivity as exc:
            raise InvalidEnvelope(f"not an activity: {exc.reason}") from exc
        claimed = self.claims.get("serviceurl")
        if claimed is not None and claimed != shape.service_url:
            raise InvalidEnvelope("the activity's serviceUrl is not the one its token was issued for")
        return activity

    def claims_identity(self) -> ClaimsIdentity:
        """The identity the HTTP trigger validated (claims, never the token)."""
        return claims_identity(self.claims, self.is_authenticated, self.authentication_type)

    def authenticate_result(self, auth: BotFrameworkAuthentication) -> AuthenticateRequestResult:
        """botbuilder's view of the request the HTTP trigger authenticated."""
        return authenticated_request(auth, self.claims_identity(), self.audience, self.caller_id)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)
