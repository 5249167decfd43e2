"""Audit checks: the HMAC keys load, the chain verifies against its anchors, the anchor store appends.

Only through the audit log's public factory and interfaces (``audit.audit_config``,
``audit.verify``, ``audit.seal``), so any anchor store behind ``AnchorStore`` is checked the
same way. The append is a real, signed anchor of the verified head (what ``audit anchor``
writes), not a test record: the store stays a true record of the chain.
"""

from __future__ import annotations

from copilot.doctor.database_checks import Database, SchemaCurrent
from copilot.doctor.framework import Check, CheckFailed, DoctorContext, settings_named
from copilot.doctor.settings_checks import aliases
from copilot.errors import AnchorStoreError, ConfigurationError
from copilot.persistence import audit
from copilot.persistence.audit_keys import SETTING as KEYS_SETTING
from copilot.persistence.audit_keys import AuditKeyring, load_keyring
from copilot.persistence.database import connect
from copilot.settings import Settings

SETTINGS = "the copilot's settings (settings.copilot)"


async def keys(ctx: DoctorContext) -> str:
    settings = ctx.need(Settings, SETTINGS)
    try:
        keyring = load_keyring(settings)
    except ConfigurationError as exc:
        raise CheckFailed(
            str(exc),
            setting=KEYS_SETTING,
            fix=f"set {KEYS_SETTING} to 'kid:base64key' (32+ random bytes; newest first), as a Key Vault "
            "reference: python -c 'from copilot.persistence.audit_keys import generate_key_entry as g; print(g())'",
        ) from exc
    ctx.provide(keyring)
    return (
        f"{len(keyring.keys)} key(s) from {keyring.source}; new rows chained with {keyring.current.key_id!r}"
    )


def _config(settings: Settings) -> audit.AuditConfig:
    try:
        return audit.audit_config(settings)
    except ConfigurationError as exc:
        names = settings_named(str(exc), aliases(Settings))
        raise CheckFailed(
            str(exc), setting=names, fix=f"set {names or 'the audit settings'} as the message says"
        ) from exc


async def chain(ctx: DoctorContext) -> str:
    """The audit log's HMAC chain verifies against the anchor store's signed checkpoints."""
    settings = ctx.need(Settings, SETTINGS)
    ctx.need(Database, "a reachable database (database.reachable)")
    # An older schema lacks columns the chain hashes: that is the migrations check's failure.
    ctx.need(SchemaCurrent, "the current schema (database.migrations)")
    ctx.need(AuditKeyring, "the audit keys (audit.keys)")
    config = _config(settings)
    async with connect(settings) as conn:
        try:
            report = await audit.verify(conn, config=config)
        except AnchorStoreError as exc:
            raise _store_failure(exc, settings, config) from exc
    if not report.ok:
        where = f"at row {report.first_bad_id}" if report.first_bad_id is not None else "in the anchor store"
        raise CheckFailed(
            f"the audit log does not verify {where}: {report.problem}",
            setting=KEYS_SETTING,
            fix=f"if {KEYS_SETTING} was rotated, keep every key rows were chained with (newest first); "
            "otherwise treat it as tampering: run `python -m copilot audit verify` and investigate",
        )
    ctx.provide(report)
    return f"{report.rows_checked} row(s) verified against {report.anchors_checked} anchor(s) in {report.anchor_store}"


async def anchor_append(ctx: DoctorContext) -> str:
    """The anchor store accepts an append: a signed anchor of the head just verified."""
    settings = ctx.need(Settings, SETTINGS)
    report = ctx.need(audit.VerifyReport, "a verified audit chain (audit.chain)")
    config = _config(settings)
    async with connect(settings) as conn:
        try:
            anchor = await audit.seal(conn, report, config=config)
        except AnchorStoreError as exc:
            raise _store_failure(exc, settings, config) from exc
    assert anchor is not None
    head = "the empty log" if anchor.last_id is None else f"row {anchor.last_id}"
    return f"appended a signed anchor of {head} to {config.anchors.location if config.anchors else '?'}"


def _store_failure(exc: AnchorStoreError, settings: Settings, config: audit.AuditConfig) -> CheckFailed:
    location = config.anchors.location if config.anchors is not None else ""
    names = settings_named(str(exc), aliases(Settings))
    if (
        names is None
        and settings.audit_anchor_file is not None
        and location == str(settings.audit_anchor_file)
    ):
        names = "COPILOT_AUDIT_ANCHOR_FILE"
    return CheckFailed(
        str(exc),
        setting=names,
        fix="point the anchor store at append-only storage the app's identity can read and append to",
    )


CHECKS = (
    Check("audit.keys", keys),
    Check("audit.chain", chain),
    Check("audit.anchor_append", anchor_append),
)
