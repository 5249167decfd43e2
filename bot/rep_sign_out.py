"""``data delete --rep``: sign the rep out at the Bot Framework token service.

When a rep signs in, the bot leaves their sign-in at the token service (the bot's OAuth
connection, ``bot.token_service_sign_in``), so the timers can read for them. Deleting the
rep's data must end that too, or the timers would still get a token for them. botbuilder's
public user-token API does it: ``create_user_token_client(claims_identity)`` →
``UserTokenClient.sign_out_user(user_id, connection_name, channel_id)``, with the bot's own app
token, as every other call to the service.

The service knows the rep by their channel user id (Teams' ``29:…``), not their AAD object id:
it is read from the rep's stored conversation references (their chats with the bot, and the
one their briefs go to), which is why this runs before the database rows go.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from botframework.connector.auth import AuthenticationConstants, ClaimsIdentity
from botframework.connector.token_api.models import ErrorResponseException
from msrest.exceptions import ClientRequestError
from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row

from bot.runtime import build_authentication
from bot.settings import BotSettings
from copilot.persistence.outside_data import OutsideStep

logger = logging.getLogger(__name__)

PLACE = "Bot Framework token service (the rep's sign-in at the bot's OAuth connection)"

_REFERENCE_TABLES = ("conversations", "brief_settings")
"""The bot's tables that keep the rep's conversation references (bot/sql)."""


async def channel_users(conn: AsyncConnection[Any], *, rep: str, tenant: str | None) -> list[tuple[str, str]]:
    """``(user id, channel id)`` of every stored conversation reference of the rep, distinct."""
    found: set[tuple[str, str]] = set()
    for table in _REFERENCE_TABLES:
        query = sql.SQL("SELECT reference FROM {} WHERE aad_object_id = %(rep)s").format(
            sql.Identifier(table)
        )
        if tenant is not None:
            query += sql.SQL(" AND tenant_id = %(tenant)s")
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query, {"rep": rep, "tenant": tenant})
            rows = await cur.fetchall()
        for row in rows:
            reference = row["reference"]
            if isinstance(reference, str):
                reference = json.loads(reference)
            user = reference.get("user") if isinstance(reference, dict) else None
            user_id = user.get("id") if isinstance(user, dict) else None
            channel_id = reference.get("channelId") if isinstance(reference, dict) else None
            if isinstance(user_id, str) and user_id and isinstance(channel_id, str) and channel_id:
                found.add((user_id, channel_id))
    return sorted(found)


async def sign_out_rep(
    settings: BotSettings, conn: AsyncConnection[Any], *, rep: str, tenant: str | None, dry_run: bool
) -> OutsideStep:
    """Sign the rep out at the token service (an :class:`~copilot.persistence.outside_data.OutsideEraser`)."""
    if settings.dev_mode:
        return OutsideStep(
            PLACE, "not_configured", "local development mode (no MicrosoftAppId): no token service is used"
        )
    connection = settings.sso_connection_name
    if not connection:
        return OutsideStep(
            PLACE,
            "failed",
            "COPILOT_SSO_CONNECTION is not set, so the rep's sign-in cannot be named: set it to the "
            "Azure Bot's OAuth connection and run `data delete` again, or sign the rep out in the "
            "Azure portal (the Azure Bot → Settings → OAuth connection → Test connection shows it)",
        )
    users = await channel_users(conn, rep=rep, tenant=tenant)
    if not users:
        return OutsideStep(
            PLACE, "done", "no conversation of the rep is stored: no Teams user id is known to sign out"
        )
    if dry_run:
        return OutsideStep(
            PLACE,
            "would",
            f"would sign out {len(users)} Teams user id(s) at connection {connection}",
            len(users),
        )
    authentication = build_authentication(settings)
    app_id = settings.microsoft_app_id
    identity = ClaimsIdentity(
        {AuthenticationConstants.AUDIENCE_CLAIM: app_id, AuthenticationConstants.APP_ID_CLAIM: app_id}, True
    )
    client = await authentication.create_user_token_client(identity)
    failures: list[str] = []
    for user_id, channel_id in users:
        try:
            await client.sign_out_user(user_id, connection, channel_id)
        except ErrorResponseException as exc:
            failures.append(f"{channel_id}: {exc.message}")
        except ClientRequestError as exc:
            failures.append(f"{channel_id}: the token service is unreachable ({exc})")
        except Exception as exc:  # noqa: BLE001 - e.g. the bot's own credentials refused: say so
            failures.append(
                f"{channel_id}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
    if failures:
        return OutsideStep(
            PLACE,
            "failed",
            f"signed out {len(users) - len(failures)} of {len(users)}; "
            + "; ".join(failures)
            + " (run `data delete` again once the service answers)",
            len(users) - len(failures),
        )
    return OutsideStep(PLACE, "done", f"signed out at connection {connection}", len(users))
