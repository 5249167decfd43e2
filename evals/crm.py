"""The CRM as a rep sees it, over MCP with the rep's own delegated token: what the dataset
generator reads and what an item's setup writes (planted record text)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from mcp import ClientSession

from copilot.auth.tokens import TokenBroker
from copilot.settings import Settings
from copilot.tools.crm_client import CrmGateway, open_crm_session
from copilot.tools.session_host import SessionHost


@asynccontextmanager
async def rep_crm(
    settings: Settings, broker: TokenBroker, *, write: bool = False
) -> AsyncIterator[CrmGateway]:
    """One MCP session to the CRM as the rep whose tokens ``broker`` exchanges."""
    token = await broker.crm_token(write=write)

    def opener() -> AbstractAsyncContextManager[ClientSession]:
        return open_crm_session(settings, token)

    host = SessionHost(opener, name="eval")
    try:
        yield CrmGateway(host)
    finally:
        await host.aclose()


async def every_page(crm: CrmGateway, tool: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """All items of a paged CRM list, in the order the CRM returns them."""
    items: list[dict[str, Any]] = []
    args = dict(arguments)
    while True:
        page = await crm.call(tool, args)
        found = page.get("items")
        items.extend(item for item in (found if isinstance(found, list) else []) if isinstance(item, dict))
        cursor = page.get("next_cursor")
        if not cursor:
            return items
        args = {**arguments, "cursor": cursor}
