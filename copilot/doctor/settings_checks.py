"""Settings checks: every setting present and well formed under the deployed environment."""

from __future__ import annotations

import re

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from copilot.doctor.framework import Check, CheckFailed, DoctorContext, settings_named
from copilot.errors import ConfigurationError
from copilot.settings import Settings

KEY_VAULT_REFERENCE = re.compile(r"^\s*@Microsoft\.KeyVault\(", re.IGNORECASE)
"""An app setting the platform left as written: its Key Vault reference did not resolve."""

KEY_VAULT_FIX = (
    "give the Function App's identity (keyVaultReferenceIdentity) the 'Key Vault Secrets User' role "
    "on the vault, and check the reference's SecretUri (or VaultName/SecretName) names an existing, "
    "enabled secret; the portal shows each reference's status under Environment variables"
)


def aliases(model: type[BaseSettings]) -> list[str]:
    """The setting names (environment variables) a settings class reads."""
    return [field.alias or name for name, field in model.model_fields.items()]


def validation_failure(exc: ValidationError, what: str) -> CheckFailed:
    """A settings class refused its values: name each setting and what is wrong with it."""
    problems = [(".".join(str(p) for p in error["loc"]), error["msg"]) for error in exc.errors()]
    names = ", ".join(dict.fromkeys(name for name, _ in problems))
    detail = "; ".join(f"{name}: {message}" for name, message in problems)
    return CheckFailed(f"{what} refused: {detail}", setting=names, fix=f"correct {names} in the app settings")


def configuration_failure(exc: ConfigurationError, model: type[BaseSettings]) -> CheckFailed:
    """A settings class's own rule refused the values: its message names the settings."""
    names = settings_named(exc.message, aliases(model)) or settings_named(
        exc.message, ["COPILOT_ENVIRONMENT"]
    )
    return CheckFailed(
        exc.message, setting=names, fix=f"set {names or 'the settings named'} as the message says"
    )


async def key_vault_references(ctx: DoctorContext) -> str:
    """No app setting still holds a ``@Microsoft.KeyVault(...)`` reference."""
    unresolved = sorted(name for name, value in ctx.environ.items() if KEY_VAULT_REFERENCE.match(value))
    if unresolved:
        raise CheckFailed(
            f"{len(unresolved)} setting(s) still hold an unresolved Key Vault reference "
            f"(the platform could not read the secret): {', '.join(unresolved)}",
            setting=", ".join(unresolved),
            fix=KEY_VAULT_FIX,
        )
    return f"no unresolved Key Vault reference among {len(ctx.environ)} settings"


async def copilot_settings(ctx: DoctorContext) -> str:
    """The copilot's settings build under ``COPILOT_ENVIRONMENT=deployed`` (every rule they hold)."""
    environment = ctx.environ.get("COPILOT_ENVIRONMENT", "local")
    try:
        settings = Settings()
    except ValidationError as exc:
        raise validation_failure(exc, "the copilot's settings") from exc
    except ConfigurationError as exc:
        raise configuration_failure(exc, Settings) from exc
    ctx.provide(settings)
    if settings.environment != "deployed":
        raise CheckFailed(
            f"COPILOT_ENVIRONMENT is {environment!r}: local defaults (the sandbox, the offline model, "
            "generated keys) would hide every missing setting",
            setting="COPILOT_ENVIRONMENT",
            fix="set COPILOT_ENVIRONMENT=deployed (the doctor judges a deployment)",
        )
    return f"valid for a deployment (model {settings.copilot_model}, CRM {settings.crm_mcp_url})"


CHECKS = (
    Check("settings.key_vault_references", key_vault_references),
    Check("settings.copilot", copilot_settings),
)
