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
from copilot.settings import Settings
from copilot.tools.mcp_http import shared_transport

PEOPLE_SCOPE = "User.ReadBasic.All"


def people_scopes(settings: Settings) -> list[str]:
    """The delegated scope the lookup needs, on the Graph resource."""
    return [f"{settings.graph_resource}/{PEOPLE_SCOPE}"]


async def find_colleague(settings: Settings, token: str, rep: RepIdentity, who: str) -> Colleague:
    """The one user of the rep's organisation that ``who`` (an email / UPN or a display name)
    names. Raises :class:`InvalidInput` when no one, or more than one, or a guest matches."""
    who = who.strip()
    if not who:
        raise InvalidInput("name the colleague (their email address or full name)")
    if "@" in who:
        url, params = f"{settings.graph_base_url}/users/{quote(who, safe='@')}", None
    else:
        url, params = (
            f"{settings.graph_base_url}/users",
            {"$filter": f"displayName eq '{who.replace(chr(39), chr(39) * 2)}'"},
        )
    try:
        async with httpx.AsyncClient(
            timeout=settings.crm_timeout_seconds, transport=shared_transport()
        ) as client:
            response = await client.get(url, params=params, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise DirectoryUnavailable(f"the directory is unavailable ({type(exc).__name__})") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise DirectoryUnavailable(f"the directory answered HTTP {response.status_code}")
    not_found = InvalidInput(f"I couldn't find {who!r} in your organisation")
    if response.status_code == 404:
        raise not_found
    if response.status_code != 200:
        raise InvalidInput(f"the directory refused the lookup of {who!r} (HTTP {response.status_code})")
    body: dict[str, Any] = response.json()
    users: list[dict[str, Any]] = body.get("value", [body])
    if not users:
        raise not_found
    if len(users) > 1:
        raise InvalidInput(f"more than one person is called {who!r}: use their email address")
    user = users[0]
    if str(user.get("userType", "Member")) == "Guest":
        raise InvalidInput("approvals can be delegated only to a colleague in your own organisation")
    return Colleague(
        tenant_id=rep.tenant_id, aad_object_id=str(user["id"]), name=str(user.get("displayName", who))
    )
