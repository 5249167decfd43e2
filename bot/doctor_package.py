"""The preflight's ``teams.package`` check: the Teams app package an admin uploaded (or is about
to) names this deployment's bot and domain.

A package built for another app id makes Teams deliver reps' messages to another bot, and one
built for another domain breaks SSO (``webApplicationInfo.resource``) and the sign-in card
(``validDomains``): both look like "the bot does not answer". The package is given by path in
``COPILOT_DOCTOR_APP_PACKAGE`` (``build/appPackage.zip`` from ``make infra-package``); without it
the check is skipped.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from bot.settings import BotSettings
from copilot.doctor.framework import CheckFailed, CheckSkipped, DoctorContext

APP_PACKAGE_ENV = "COPILOT_DOCTOR_APP_PACKAGE"
REBUILD = (
    "rebuild the package from the deployment (make infra-package RESOURCE_GROUP=… APP_VERSION=<higher>) "
    "and upload it in the Teams admin center, or correct the app setting"
)


def _manifest(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as archive:
            manifest: dict[str, Any] = json.loads(archive.read("manifest.json"))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise CheckFailed(
            f"{path} is not a Teams app package with a manifest.json: {exc}",
            setting=APP_PACKAGE_ENV,
            fix=f"point {APP_PACKAGE_ENV} at the zip built by make infra-package (build/appPackage.zip)",
        ) from exc
    return manifest


def _mismatches(manifest: dict[str, Any], app_id: str, domain: str) -> list[tuple[str, str]]:
    """(what differs, the app setting it differs from) for the bot id and domain."""
    found: list[tuple[str, str]] = []
    bot_ids = [bot.get("botId") for bot in manifest.get("bots", [])]
    if bot_ids != [app_id]:
        found.append((f"its bot id {bot_ids} is not MicrosoftAppId {app_id!r}", "MicrosoftAppId"))
    sso = manifest.get("webApplicationInfo", {})
    if sso.get("id") != app_id:
        found.append((f"its SSO app id {sso.get('id')!r} is not MicrosoftAppId {app_id!r}", "MicrosoftAppId"))
    expected_resource = f"api://{domain}/{app_id}"
    if sso.get("resource") != expected_resource:
        found.append((f"its SSO resource {sso.get('resource')!r} is not {expected_resource!r}", "BOT_DOMAIN"))
    if domain not in manifest.get("validDomains", []):
        found.append(
            (f"its validDomains {manifest.get('validDomains')} lack BOT_DOMAIN {domain!r}", "BOT_DOMAIN")
        )
    return found


async def teams_package(ctx: DoctorContext) -> str:
    """The app package's bot id, SSO app and domain are this deployment's."""
    settings = ctx.need(BotSettings, "the bot's settings (settings.bot)")
    given = ctx.environ.get(APP_PACKAGE_ENV, "").strip()
    if not given:
        raise CheckSkipped(f"no package to compare: set {APP_PACKAGE_ENV} to the uploaded app package's zip")
    path = Path(given)
    manifest = _manifest(path)
    mismatches = _mismatches(manifest, settings.microsoft_app_id, settings.bot_domain)
    if mismatches:
        settings_named = ", ".join(dict.fromkeys(setting for _, setting in mismatches))
        raise CheckFailed(
            f"the app package {path.name} (version {manifest.get('version')}) is not this deployment's: "
            + "; ".join(what for what, _ in mismatches),
            setting=settings_named,
            fix=REBUILD,
        )
    return (
        f"{path.name} version {manifest.get('version')}: bot and SSO app {settings.microsoft_app_id}, "
        f"domain {settings.bot_domain}"
    )
