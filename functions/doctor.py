"""The Functions app's preflight checks, and every layer's checks in one list (the top layer's).

``python -m copilot doctor`` runs :func:`all_checks`: the copilot's own
(``copilot.doctor.checks``), the bot's (``bot.doctor``), then these. The copilot's command
line reaches this module lazily, for that one command (``tests/unit/test_layering.py``):
the preflight checks the whole deployed app, and only the top layer knows all of it.
"""

from __future__ import annotations

from azure.core.exceptions import AzureError, ResourceNotFoundError

from bot.doctor import BOT_CHECKS
from bot.settings import BotSettings
from copilot.doctor.checks import COPILOT_CHECKS
from copilot.doctor.framework import Check, CheckFailed, DoctorContext
from functions.host import queue_client
from functions.turns import poison_queue_name


async def queues(ctx: DoctorContext) -> str:
    """The turn queue and its poison queue exist in the app's storage (``AzureWebJobsStorage``,
    or ``AzureWebJobsStorage__queueServiceUri`` with the managed identity)."""
    settings = ctx.need(BotSettings, "the bot's settings (settings.bot)")
    names = [settings.queue_name, poison_queue_name(settings.queue_name)]
    missing: list[str] = []
    for name in names:
        try:
            # No retries: an unreachable account should fail the check now, not in a minute.
            client = queue_client(settings, name, retry_total=0)
        except ValueError as exc:
            raise CheckFailed(
                f"AzureWebJobsStorage is not a storage connection string: {exc}",
                setting="AzureWebJobsStorage",
                fix="set AzureWebJobsStorage to the storage account's connection string",
            ) from exc
        async with client:
            try:
                await client.get_queue_properties()
            except ResourceNotFoundError:
                missing.append(name)
            except AzureError as exc:
                raise CheckFailed(
                    f"the queue service is unreachable: {type(exc).__name__}: {exc}",
                    setting="AzureWebJobsStorage",
                    fix="check AzureWebJobsStorage and that the app can reach the storage account",
                ) from exc
    if missing:
        raise CheckFailed(
            f"missing queue(s): {', '.join(missing)}",
            setting="COPILOT_TURN_QUEUE",
            fix="create the turn queue and its -poison queue in the storage account (the template does), "
            "or correct COPILOT_TURN_QUEUE",
        )
    return f"{', '.join(names)} exist"


FUNCTIONS_CHECKS: tuple[Check, ...] = (Check("queues", queues),)


def all_checks() -> tuple[Check, ...]:
    """Every layer's checks, in the order they run."""
    copilot_settings_checks = COPILOT_CHECKS[:2]
    return (*copilot_settings_checks, *BOT_CHECKS, *COPILOT_CHECKS[2:], *FUNCTIONS_CHECKS)
