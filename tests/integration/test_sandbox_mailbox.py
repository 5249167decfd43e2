"""The sandbox's Graph-shaped drafts mailbox: own drafts only, never sends, Graph-style errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from sandbox.config import SandboxSettings
from sandbox.directory import find_user
from sandbox.identity.tokens import issue_token
from sandbox.mailbox import mailbox_routes

pytestmark = pytest.mark.integration

DRAFT: dict[str, Any] = {
    "subject": "Follow-up on the Q3 renewal",
    "body": {"contentType": "text", "content": "Hi Jane,\nthanks for the call today."},
    "toRecipients": [{"emailAddress": {"address": "jane@customer.example", "name": "Jane Doe"}}],
}


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> SandboxSettings:
    return SandboxSettings(data_dir=tmp_path_factory.mktemp("mailbox"))


@pytest.fixture(scope="module")
def client(settings: SandboxSettings) -> Iterator[TestClient]:
    with TestClient(Starlette(routes=mailbox_routes(settings)), base_url="https://localhost") as test_client:
        yield test_client


def _headers(settings: SandboxSettings, handle: str, scopes: list[str] | None = None) -> dict[str, str]:
    user = find_user(handle)
    assert user is not None
    token = issue_token(
        settings, user=user, audience=settings.graph_audience, scopes=scopes or ["Mail.ReadWrite"]
    )
    return {"Authorization": f"Bearer {token}"}


def test_user_creates_a_draft_and_reads_it_back(client: TestClient, settings: SandboxSettings) -> None:
    created = client.post("/v1.0/me/messages", json=DRAFT, headers=_headers(settings, "alex"))

    assert created.status_code == 201
    message = created.json()
    assert message["isDraft"] is True
    assert message["subject"] == DRAFT["subject"]
    assert message["body"] == DRAFT["body"]
    assert message["toRecipients"][0]["emailAddress"]["address"] == "jane@customer.example"
    assert message["from"] == {"emailAddress": {"name": "Alex Wilber", "address": "alex@contoso.example"}}
    assert message["sender"] == message["from"]
    assert message["createdDateTime"].endswith("Z")

    fetched = client.get(f"/v1.0/me/messages/{message['id']}", headers=_headers(settings, "alex"))
    assert fetched.status_code == 200
    assert fetched.json() == message


def test_list_shows_only_the_callers_drafts(client: TestClient, settings: SandboxSettings) -> None:
    mine = client.post("/v1.0/me/messages", json=DRAFT, headers=_headers(settings, "megan")).json()

    megan_ids = [
        m["id"] for m in client.get("/v1.0/me/messages", headers=_headers(settings, "megan")).json()["value"]
    ]
    diego_ids = [
        m["id"] for m in client.get("/v1.0/me/messages", headers=_headers(settings, "diego")).json()["value"]
    ]

    assert mine["id"] in megan_ids
    assert mine["id"] not in diego_ids


def test_another_user_cannot_read_a_draft(client: TestClient, settings: SandboxSettings) -> None:
    draft = client.post("/v1.0/me/messages", json=DRAFT, headers=_headers(settings, "alex")).json()

    for handle in ("megan", "priya"):  # same tenant and another tenant
        response = client.get(f"/v1.0/me/messages/{draft['id']}", headers=_headers(settings, handle))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "ErrorItemNotFound"
        assert DRAFT["subject"] not in response.text


def test_unknown_draft_is_not_found(client: TestClient, settings: SandboxSettings) -> None:
    response = client.get("/v1.0/me/messages/draft-nope", headers=_headers(settings, "alex"))

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "ErrorItemNotFound"


def test_sending_is_not_supported(client: TestClient, settings: SandboxSettings) -> None:
    draft = client.post("/v1.0/me/messages", json=DRAFT, headers=_headers(settings, "alex")).json()

    for path in (f"/v1.0/me/messages/{draft['id']}/send", "/v1.0/me/sendMail"):
        response = client.post(path, json={"message": DRAFT}, headers=_headers(settings, "alex"))
        assert response.status_code == 405
        assert "not supported" in response.json()["error"]["message"]


def test_request_without_token_is_401(client: TestClient) -> None:
    response = client.get("/v1.0/me/messages")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "InvalidAuthenticationToken"
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_token_for_another_audience_is_401(client: TestClient, settings: SandboxSettings) -> None:
    user = find_user("alex")
    assert user is not None
    token = issue_token(settings, user=user, audience=settings.crm_audience, scopes=["Mail.ReadWrite"])

    response = client.get("/v1.0/me/messages", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 401


def test_token_without_mail_readwrite_is_403(client: TestClient, settings: SandboxSettings) -> None:
    response = client.post("/v1.0/me/messages", json=DRAFT, headers=_headers(settings, "alex", ["Mail.Read"]))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ErrorAccessDenied"


@pytest.mark.parametrize(
    "body",
    [
        [],
        {**DRAFT, "subject": 42},
        {**DRAFT, "body": "plain string"},
        {**DRAFT, "body": {"contentType": "rtf", "content": "x"}},
        {**DRAFT, "toRecipients": [{"emailAddress": {"address": "not-an-email"}}]},
        {**DRAFT, "toRecipients": "jane@customer.example"},
        {**DRAFT, "ccRecipients": []},
    ],
)
def test_invalid_message_body_is_400(client: TestClient, settings: SandboxSettings, body: Any) -> None:
    response = client.post("/v1.0/me/messages", json=body, headers=_headers(settings, "alex"))

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "ErrorInvalidRequest"


def test_malformed_json_is_400(client: TestClient, settings: SandboxSettings) -> None:
    response = client.post(
        "/v1.0/me/messages",
        content=b"{not json",
        headers={**_headers(settings, "alex"), "Content-Type": "application/json"},
    )

    assert response.status_code == 400


def test_a_user_deletes_their_unsent_draft_but_not_a_sent_one_or_anyone_elses(
    client: TestClient, settings: SandboxSettings
) -> None:
    from sandbox import db

    mine = client.post("/v1.0/me/messages", json=DRAFT, headers=_headers(settings, "alex")).json()
    other = client.delete(f"/v1.0/me/messages/{mine['id']}", headers=_headers(settings, "megan"))
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "ErrorItemNotFound"

    deleted = client.delete(f"/v1.0/me/messages/{mine['id']}", headers=_headers(settings, "alex"))
    assert deleted.status_code == 204
    assert (
        client.get(f"/v1.0/me/messages/{mine['id']}", headers=_headers(settings, "alex")).status_code == 404
    )
    again = client.delete(f"/v1.0/me/messages/{mine['id']}", headers=_headers(settings, "alex"))
    assert again.status_code == 404

    sent = client.post("/v1.0/me/messages", json=DRAFT, headers=_headers(settings, "alex")).json()
    db.mark_draft_sent(settings.db_path, draft_id=sent["id"])  # the user sent it from Outlook
    refused = client.delete(f"/v1.0/me/messages/{sent['id']}", headers=_headers(settings, "alex"))
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "ErrorMessageAlreadySent"
    assert set(error["innerError"]) >= {"date", "request-id", "client-request-id"}
    kept = client.get(f"/v1.0/me/messages/{sent['id']}", headers=_headers(settings, "alex")).json()
    assert kept["isDraft"] is False
