"""Who a rep means by a colleague's name or email: Microsoft Graph's user lookup, as the rep.

Read with the rep's own delegated Graph token (``User.ReadBasic.All``), so the answer comes
from the rep's own directory: a colleague of another organisation is not found, and a guest
account (``userType`` ``Guest``, someone of another organisation) is refused as one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from copilot.delegation import Colleague
from copilot.errors import DirectoryUnavailable, InvalidInput
from copilot.identity import RepIdentity
from copilot.redaction import REDACTED_PREFIX
from copilot.settings import Settings
from copilot.tools.mcp_http import shared_transport

PEOPLE_SCOPE = "User.ReadBasic.All"


def people_scopes(settings: Settings) -> list[str]:
    """The delegated scope the lookup needs, on the Graph resource."""
    return [f"{settings.graph_resource}/{PEOPLE_SCOPE}"]


async def find_colleague(settings: Settings, token: str, rep: RepIdentity, who: str) -> Colleague:
    """The one user of the rep's organisation that ``who`` names: an email / UPN, a full display
    name, or the start of one ("Megan" for Megan Bowen, when she is the only Megan). Raises
    :class:`InvalidInput` when no one or a guest matches, or asks which when more than one does."""
    who = who.strip()
    if not who:
        raise InvalidInput("name the colleague (their email address or full name)")
    if REDACTED_PREFIX in who:
        # Email addresses never reach the model (copilot/middleware/pii.py): it can only
        # pass on the placeholder it was shown.
        raise InvalidInput("I can't use an email address here: name the colleague instead (their full name)")
    quoted = who.replace(chr(39), chr(39) * 2)
    if "@" in who:
        users = await _users(
            settings, token, who, f"{settings.graph_base_url}/users/{quote(who, safe='@')}", None
        )
    else:
        url = f"{settings.graph_base_url}/users"
        users = await _users(settings, token, who, url, {"$filter": f"displayName eq '{quoted}'"})
        if not users:
            # A first name, or the start of a name: Graph's startswith on displayName.
            users = await _users(
                settings, token, who, url, {"$filter": f"startswith(displayName,'{quoted}')"}
            )
    if not users:
        raise InvalidInput(f"I couldn't find {who!r} in your organisation")
    if len(users) > 1:
        names = " or ".join(
            f"{u.get('displayName')} ({u.get('mail') or u.get('userPrincipalName')})" for u in users[:5]
        )
        raise InvalidInput(f"more than one person is called {who!r}: {names}. Which one?")
    user = users[0]
    if str(user.get("userType", "Member")) == "Guest":
        raise InvalidInput("approvals can be delegated only to a colleague in your own organisation")
    return Colleague(
        tenant_id=rep.tenant_id, aad_object_id=str(user["id"]), name=str(user.get("displayName", who))
    )


async def _users(
    settings: Settings, token: str, who: str, url: str, params: dict[str, str] | None
) -> list[dict[str, Any]]:
    """The users one Graph lookup answers (none for a 404)."""
    try:
        async with httpx.AsyncClient(
            timeout=settings.crm_timeout_seconds, transport=shared_transport()
        ) as client:
            response = await client.get(url, params=params, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise DirectoryUnavailable(f"the directory is unavailable ({type(exc).__name__})") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise DirectoryUnavailable(f"the directory answered HTTP {response.status_code}")
    if response.status_code == 404:
        return []
    if response.status_code != 200:
        raise InvalidInput(f"the directory refused the lookup of {who!r} (HTTP {response.status_code})")
    body: dict[str, Any] = response.json()
    users: list[dict[str, Any]] = body.get("value", [body])
    return users
