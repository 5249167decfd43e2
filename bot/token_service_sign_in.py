"""A Teams SSO sign-in, left at the Bot Framework token service for the timers.

The brief and digest timers have no incoming activity: they ask the token service for the
rep's token at the bot's OAuth connection (``bot.proactive_reps``). The rep signs in there
when the bot exchanges the Teams SSO token of ``signin/tokenExchange`` into the service, as
botbuilder's own ``TeamsSSOTokenExchangeMiddleware`` does: the turn's ``UserTokenClient``
(``CloudAdapter`` puts it in the turn state under ``USER_TOKEN_CLIENT_KEY``) →
``exchange_token(from.id, connection, channel id, TokenExchangeRequest(token=...))``.

The service answers 200 with a ``TokenResponse`` when it kept the sign-in; botbuilder hands
back its 400 as an ``ErrorResponse`` and its 404 as a ``TokenResponse`` without a token, and
raises for anything else (``ErrorResponseException``) or an unreachable service
(``ClientRequestError``). Every one but a token is "not signed in at the service".
"""

from __future__ import annotations

import logging

from botbuilder.core import CloudAdapterBase, TurnContext
from botframework.connector.auth import UserTokenClient
from botframework.connector.token_api.models import (
    ErrorResponse,
    ErrorResponseException,
    TokenExchangeRequest,
)
from msrest.exceptions import ClientRequestError

logger = logging.getLogger(__name__)


async def exchange_at_token_service(turn_context: TurnContext, connection_name: str, sso_token: str) -> bool:
    """Exchange the rep's Teams SSO token into the token service at ``connection_name``.

    True when the service now holds a token for the turn's user (``from.id``, what the timers
    ask it for); False otherwise, with the reason logged (never the token, never to the rep).
    """
    client = turn_context.turn_state.get(CloudAdapterBase.USER_TOKEN_CLIENT_KEY)
    activity = turn_context.activity
    user_id = getattr(activity.from_property, "id", None)
    if not isinstance(client, UserTokenClient) or not user_id or not activity.channel_id:
        logger.warning("sign-in: this turn has no user token client or no user; not exchanged")
        return False
    try:
        response = await client.exchange_token(
            user_id, connection_name, activity.channel_id, TokenExchangeRequest(token=sso_token)
        )
    except ErrorResponseException as exc:
        logger.warning("sign-in: the Bot Framework token service refused the exchange: %s", exc.message)
        return False
    except ClientRequestError as exc:
        logger.warning("sign-in: the Bot Framework token service is unreachable: %s", exc)
        return False
    if isinstance(response, ErrorResponse):
        error = response.error
        logger.warning(
            "sign-in: the Bot Framework token service refused the exchange: %s %s",
            getattr(error, "code", None),
            getattr(error, "message", None),
        )
        return False
    if not getattr(response, "token", None):
        logger.warning("sign-in: the Bot Framework token service answered the exchange without a token")
        return False
    return True
