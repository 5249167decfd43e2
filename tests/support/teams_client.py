"""A Teams stand-in for bot tests: Teams-shaped activities in, a fake Bot Connector out."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from aiohttp import web

from bot.runtime import BotRuntime
from bot.server import RUNTIME, build_app
from bot.settings import BotSettings
from copilot.clock import Clock
from copilot.settings import Settings
from sandbox.directory import PLAYGROUND_AAD_OBJECT_ID
from tests.support.fake_connector import FakeConnector, Recorded, card_of, find_actions

TENANT = "00000000-0000-0000-0000-000000000001"


class Teams:
    """Sends Teams-shaped activities to the bot and reads what came back."""

    def __init__(self, bot_url: str, connector: FakeConnector):
        self.bot_url = bot_url
        self.connector = connector
        self.conversation = f"conv-{uuid.uuid4().hex[:8]}"
        self.runtime: BotRuntime | None = None

    def set_clock(self, clock: Clock) -> None:
        """Pin the running bot's service clock (its "now": brief me, digest me, delegations)."""
        assert self.runtime is not None, "the bot is not running"
        self.runtime.service.clock = clock

    def activity(self, aad: str = PLAYGROUND_AAD_OBJECT_ID, **fields: Any) -> dict[str, Any]:
        return {
            "type": "message",
            "id": uuid.uuid4().hex,
            "channelId": "msteams",
            "serviceUrl": self.connector.url,
            "from": {"id": f"29:{aad}", "name": "Rep", "aadObjectId": aad},
            "conversation": {"id": self.conversation, "conversationType": "personal", "tenantId": TENANT},
            "recipient": {"id": "28:bot", "name": "CRM Copilot"},
            "channelData": {"tenant": {"id": TENANT}},
            **fields,
        }

    async def send(self, activity: dict[str, Any]) -> int:
        async with httpx.AsyncClient(timeout=120) as client:
            response = await client.post(self.bot_url, json=activity)
        return response.status_code

    async def say(self, text: str, aad: str = PLAYGROUND_AAD_OBJECT_ID) -> None:
        assert await self.send(self.activity(aad, text=text)) in (200, 201, 202)

    async def submit(
        self, card_activity_id: str, data: dict[str, Any], aad: str = PLAYGROUND_AAD_OBJECT_ID
    ) -> None:
        activity = self.activity(aad, value=data, replyToId=card_activity_id)
        assert await self.send(activity) in (200, 201, 202)

    async def open_panel(self, card_activity: Recorded, title: str) -> dict[str, Any]:
        """Press an approval card's ``Edit…`` or ``Reject…``: the card as the bot updated it."""
        current = self.connector.latest_content(card_activity.activity_id or "")
        [button] = find_actions(current, title)
        await self.submit(card_activity.activity_id or "", button["data"])
        return self.connector.latest_content(card_activity.activity_id or "")

    async def invoke(
        self, name: str, value: Any, *, reply_to_id: str | None = None, aad: str = PLAYGROUND_AAD_OBJECT_ID
    ) -> httpx.Response:
        """An ``invoke`` activity (e.g. ``message/submitAction``), answered in the response."""
        activity = self.activity(aad, type="invoke", name=name, value=value)
        if reply_to_id is not None:
            activity["replyToId"] = reply_to_id
        async with httpx.AsyncClient(timeout=120) as client:
            return await client.post(self.bot_url, json=activity)

    async def approve_last(self, aad: str = PLAYGROUND_AAD_OBJECT_ID) -> str:
        """Press Approve on the latest approval card in this conversation; the bot's reply
        (the card's outcome, as updated or posted) as text."""
        card = next(
            m
            for m in reversed(self.connector.messages())
            if m.conversation_id == self.conversation
            and m.body.get("attachments")
            and find_actions(card_of(m), "Approve")
        )
        [approve] = find_actions(card_of(card), "Approve")
        await self.submit(card.activity_id or "", approve["data"], aad)
        content = self.connector.latest_content(card.activity_id or "")
        return repr(content) + "\n" + self.last_text()

    def last_text(self) -> str:
        message = self.connector.messages()[-1]
        text = message.body.get("text") or ""
        for attachment in message.body.get("attachments") or []:
            text += repr(attachment.get("content"))
        return text


@asynccontextmanager
async def running_bot(settings: Settings, bot_settings: BotSettings | None = None) -> AsyncIterator[Teams]:
    """The bot's aiohttp app on a free port, replying to a fresh fake connector."""
    connector = FakeConnector()
    await connector.start()
    app = build_app(settings, bot_settings or BotSettings(MicrosoftAppId=""))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        teams = Teams(f"http://127.0.0.1:{port}/api/messages", connector)
        teams.runtime = app[RUNTIME]
        yield teams
    finally:
        await runner.cleanup()
        await connector.stop()
