"""The chat model from settings: ``offline`` or any ``provider:model`` of ``init_chat_model``."""

from __future__ import annotations

from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel

from copilot.errors import ConfigurationError
from copilot.settings import is_offline_model


def build_model(name: str) -> BaseChatModel:
    """One chat model by name; ``offline`` is the deterministic local model."""
    if is_offline_model(name):
        from offline_model import OfflineChatModel

        return OfflineChatModel()
    if ":" not in name:
        raise ConfigurationError(f"COPILOT_MODEL must be 'offline' or 'provider:model', got {name!r}")
    try:
        return init_chat_model(name)
    except (ImportError, ValueError) as exc:
        raise ConfigurationError(f"cannot use model {name!r}: {exc}") from exc
