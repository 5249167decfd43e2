"""The sandbox's Bot Framework token service stand-in: its wire protocol, as botbuilder calls it.

Raw HTTP for what the service answers (status codes, JSON names, the bot's app token being
required) and botbuilder's own ``UserTokenClient`` (built by the bot's authentication, as the
timer builds it) for proof that the SDK's paths, parameters and JSON names are the ones served.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
from botframework.connector.auth import AuthenticationConstants, ClaimsIdentity, UserTokenClient
from botframework.connector.token_api.models import ErrorResponseException, TokenExchangeRequest

from bot.runtime import build_authentication
from sandbox.directory import find_user
from tests.integration.test_brief_token_service import deployed_bot_settings
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration


def _teams_id(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return f"29:{user.aad_object_id}"


def _app_token(sandbox: SandboxProcess) -> str:
    """The bot's app-only Bot Framework token, from the sandbox identity provider."""
    settings = sandbox.settings
    response = httpx.post(
        f"{settings.idp_base_url}/botframework.com/oauth2/v2.0/token",
        data={
            "grant_type": "client_credentials",
            "client_id": settings.bot_app_id,
            "client_secret": settings.bot_client_secret,
            "scope": f"{settings.bot_connector_audience}/.default",
        },
        verify=ssl.create_default_context(cafile=str(settings.ca_cert_path)),
        timeout=30,
    )
    response.raise_for_status()
    token: str = response.json()["access_token"]
    return token


def _get_token(sandbox: SandboxProcess, authorization: str | None, **params: str) -> httpx.Response:
    query = {"connectionName": sandbox.settings.sso_connection_name, "channelId": "msteams", **params}
    headers = {"Authorization": authorization} if authorization else {}
    return httpx.get(
        f"{sandbox.settings.http_base_url}/api/usertoken/GetToken", params=query, headers=headers, timeout=30
    )


@pytest.fixture
async def user_tokens(sandbox: SandboxProcess) -> AsyncIterator[UserTokenClient]:
    """botbuilder's user-token client for the bot, as ``bot.proactive_reps`` builds it."""
    settings = deployed_bot_settings(sandbox)
    auth = build_authentication(settings)
    identity = ClaimsIdentity(
        {
            AuthenticationConstants.AUDIENCE_CLAIM: settings.microsoft_app_id,
            AuthenticationConstants.APP_ID_CLAIM: settings.microsoft_app_id,
        },
        True,
    )
    try:
        yield await auth.create_user_token_client(identity)
    finally:
        await auth.close()


def test_get_token_answers_a_token_response_for_a_signed_in_user(sandbox: SandboxProcess) -> None:
    response = _get_token(sandbox, f"Bearer {_app_token(sandbox)}", userId=_teams_id("alex"))

    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    assert set(body) == {"channelId", "connectionName", "token", "expiration"}
    assert (body["channelId"], body["connectionName"]) == ("msteams", sandbox.settings.sso_connection_name)
    claims = jwt.decode(body["token"], options={"verify_signature": False})
    alex = find_user("alex")
    assert alex is not None
    assert (claims["aud"], claims["oid"], claims["scp"]) == (
        sandbox.settings.bot_app_id,
        alex.aad_object_id,
        "access_as_user",
    )
    assert body["expiration"].endswith("Z")


def test_get_token_is_404_for_a_user_who_never_signed_in_or_whose_token_was_dropped(
    sandbox: SandboxProcess,
) -> None:
    bearer = f"Bearer {_app_token(sandbox)}"
    assert _get_token(sandbox, bearer, userId=_teams_id("megan")).status_code == 404
    assert _get_token(sandbox, bearer, userId="29:someone-unknown").status_code == 404
    sandbox.admin("PUT", "/admin/knobs", {"token_service_signed_out": ["alex"]})
    assert _get_token(sandbox, bearer, userId=_teams_id("alex")).status_code == 404
    sandbox.admin("PUT", "/admin/knobs", {})
    assert _get_token(sandbox, bearer, userId=_teams_id("alex")).status_code == 200


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param(lambda sandbox: None, id="missing"),
        pytest.param(lambda sandbox: "Bearer not-a-jwt", id="malformed"),
        pytest.param(lambda sandbox: f"Bearer {sandbox.token('alex')}", id="a-users-crm-token"),
        pytest.param(
            lambda sandbox: (
                f"Bearer {sandbox.token('alex', audience=sandbox.settings.bot_connector_audience)}"
            ),
            id="a-users-token-for-the-bot-framework",
        ),
    ],
)
def test_get_token_requires_the_bots_own_app_token(sandbox: SandboxProcess, authorization: Any) -> None:
    response = _get_token(sandbox, authorization(sandbox), userId=_teams_id("alex"))

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "Unauthorized"
    assert "token" not in response.json()


def test_get_token_refuses_a_connection_the_bot_does_not_have(sandbox: SandboxProcess) -> None:
    response = _get_token(
        sandbox, f"Bearer {_app_token(sandbox)}", userId=_teams_id("alex"), connectionName="other"
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "BadArgument"


async def test_botbuilders_user_token_client_gets_the_token_or_none(
    sandbox: SandboxProcess, user_tokens: UserTokenClient
) -> None:
    connection = sandbox.settings.sso_connection_name

    alex = await user_tokens.get_user_token(_teams_id("alex"), connection, "msteams", None)
    megan = await user_tokens.get_user_token(_teams_id("megan"), connection, "msteams", None)

    assert alex is not None
    assert alex.connection_name == connection
    assert jwt.decode(alex.token, options={"verify_signature": False})["preferred_username"] == (
        "alex@contoso.example"
    )
    assert megan is None
    with pytest.raises(ErrorResponseException):
        await user_tokens.get_user_token(_teams_id("alex"), "no-such-connection", "msteams", None)


async def test_a_teams_sso_token_exchanged_at_the_service_signs_the_user_in_until_sign_out(
    sandbox: SandboxProcess, user_tokens: UserTokenClient
) -> None:
    connection = sandbox.settings.sso_connection_name
    megan = find_user("megan")
    assert megan is not None
    sso = sandbox.token("megan", scopes=["access_as_user"], audience=sandbox.settings.bot_app_id_uri)
    alexs = sandbox.token("alex", scopes=["access_as_user"], audience=sandbox.settings.bot_app_id_uri)
    try:
        refused = await user_tokens.exchange_token(
            _teams_id("megan"), connection, "msteams", TokenExchangeRequest(uri="api://x", token=alexs)
        )
        # botbuilder hands a 400 back as the service's ErrorResponse.
        assert refused.error.code == "ExchangeFailed", "another user's token is not exchanged"
        assert await user_tokens.get_user_token(_teams_id("megan"), connection, "msteams", None) is None

        exchanged = await user_tokens.exchange_token(
            _teams_id("megan"), connection, "msteams", TokenExchangeRequest(uri="api://x", token=sso)
        )
        assert exchanged is not None
        assert exchanged.token
        later = await user_tokens.get_user_token(_teams_id("megan"), connection, "msteams", None)
        assert later is not None
        assert jwt.decode(later.token, options={"verify_signature": False})["oid"] == megan.aad_object_id
    finally:
        await user_tokens.sign_out_user(_teams_id("megan"), connection, "msteams")

    assert await user_tokens.get_user_token(_teams_id("megan"), connection, "msteams", None) is None
    assert "megan" not in sandbox.admin("GET", "/admin/token-service")["signed_in"]


async def test_an_exchange_the_knob_refuses_is_an_error_response_and_signs_nobody_in(
    sandbox: SandboxProcess, user_tokens: UserTokenClient
) -> None:
    connection = sandbox.settings.sso_connection_name
    sso = sandbox.token("megan", scopes=["access_as_user"], audience=sandbox.settings.bot_app_id_uri)
    sandbox.admin("PUT", "/admin/knobs", {"token_service_refuses_exchange": ["megan"]})
    try:
        # As botbuilder's Teams SSO middleware sends it: no uri, only the token.
        refused = await user_tokens.exchange_token(
            _teams_id("megan"), connection, "msteams", TokenExchangeRequest(token=sso)
        )
    finally:
        sandbox.admin("PUT", "/admin/knobs", {})

    assert refused.error.code == "ExchangeFailed"
    assert await user_tokens.get_user_token(_teams_id("megan"), connection, "msteams", None) is None
    assert "megan" not in sandbox.admin("GET", "/admin/token-service")["signed_in"]
