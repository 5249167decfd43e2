"""What may leave the process in a trace: masking, pseudonyms, and the tracing settings."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from copilot.errors import ConfigurationError
from copilot.identity import RepIdentity
from copilot.redaction import redact_pii
from copilot.settings import Settings
from copilot.tracing.masking import TOKEN_REDACTED, mask_text, trace_anonymizer
from copilot.tracing.pseudonym import load_pseudonym_key, rep_pseudonym
from copilot.tracing.runs import Tracing

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGV4In0.c2lnbmF0dXJlLWJ5dGVz"
REP = RepIdentity(
    tenant_id="tenant-1", aad_object_id="0000-aad-alex", name="Alex", username="alex@contoso.example"
)


def test_trace_text_is_masked_exactly_as_the_models_context_is():
    text = "Reach Jane at jane.doe@example.com or +44 20 7946 0958, else (425) 555-0142."
    assert mask_text(text, "US") == redact_pii(text, "US")
    assert mask_text(text, "US") == (
        "Reach Jane at [REDACTED_EMAIL] or [REDACTED_PHONE_NUMBER], else [REDACTED_PHONE_NUMBER]."
    )


def test_internationalised_addresses_are_masked_in_traces_as_in_the_models_context():
    text = "Reach José at josé.garcía@bücher.example or <用户@xn--fsqu00a.xn--fiqs8s>."
    assert mask_text(text, "US") == redact_pii(text, "US")
    assert mask_text(text, "US") == "Reach José at [REDACTED_EMAIL] or <[REDACTED_EMAIL]>."


def test_bearer_tokens_and_jwts_never_survive_masking():
    masked = mask_text(f"Authorization: Bearer {JWT} and a bare {JWT}", "US")
    assert JWT not in masked
    assert "eyJ" not in masked
    assert masked.count(TOKEN_REDACTED) == 2


def test_the_anonymizer_masks_strings_at_any_depth_and_leaves_other_values():
    deep: dict[str, Any] = {"value": "call 206-555-0147"}
    for _ in range(20):
        deep = {"nested": [deep]}
    payload = {"messages": [deep], "count": 3, "amount": 120000.5, "ok": True}
    masked = trace_anonymizer("US")(payload)
    node = masked["messages"][0]
    for _ in range(20):
        node = node["nested"][0]
    assert node["value"] == "call [REDACTED_PHONE_NUMBER]"
    assert (masked["count"], masked["amount"], masked["ok"]) == (3, 120000.5, True)


def test_a_reps_pseudonym_is_stable_keyed_and_reveals_nothing():
    key, other = b"a" * 32, b"b" * 32
    first = rep_pseudonym(key, REP)
    assert first == rep_pseudonym(key, REP)
    assert first != rep_pseudonym(other, REP)
    assert first != rep_pseudonym(key, RepIdentity(tenant_id="tenant-2", aad_object_id=REP.aad_object_id))
    for revealing in (REP.aad_object_id, REP.tenant_id, REP.username, REP.name):
        assert revealing not in first


def test_local_development_generates_one_pseudonym_key_and_keeps_it(tmp_path):
    settings = Settings(COPILOT_DATA_DIR=tmp_path)
    assert load_pseudonym_key(settings) == load_pseudonym_key(settings)
    assert len(load_pseudonym_key(settings)) >= 32


def test_a_short_or_malformed_pseudonym_key_is_refused_clearly(tmp_path):
    short = base64.b64encode(b"x" * 8).decode()
    with pytest.raises(ConfigurationError, match="at least 32"):
        load_pseudonym_key(Settings(**{"COPILOT_DATA_DIR": tmp_path, "COPILOT_TRACE_PSEUDONYM_KEY": short}))
    with pytest.raises(ConfigurationError, match="base64"):
        load_pseudonym_key(
            Settings(**{"COPILOT_DATA_DIR": tmp_path, "COPILOT_TRACE_PSEUDONYM_KEY": "not base64!"})
        )


def _deployed(**extra: Any) -> Settings:
    values: dict[str, Any] = {
        "COPILOT_ENVIRONMENT": "deployed",
        "MicrosoftAppId": "app",
        "MicrosoftAppPassword": "secret",
        "CRM_MCP_URL": "https://crm.example/mcp",
        "GRAPH_BASE_URL": "https://graph.example/v1.0",
        "ENTRA_AUTHORITY": "https://login.example",
        "COPILOT_MODEL": "azure_openai:gpt-4.1",
        "COPILOT_AUDIT_HMAC_KEYS": "k1:" + base64.b64encode(b"z" * 32).decode(),
        **extra,
    }
    return Settings(**values)


def test_a_deployment_with_tracing_on_needs_its_pseudonym_key():
    with pytest.raises(ConfigurationError, match="COPILOT_TRACE_PSEUDONYM_KEY"):
        _deployed(LANGSMITH_TRACING=True, LANGSMITH_API_KEY="lsv2-key")
    assert _deployed(LANGSMITH_TRACING=False).langsmith_tracing is False


async def test_with_tracing_off_a_run_yields_no_config_and_feedback_sends_nothing():
    tracing = Tracing.off()
    async with tracing.run("turn", REP, "thread") as config:
        assert config == {}
    assert await tracing.record_feedback("01a23210-4001-73c0-8a8a-afec70334796", "like") is False
