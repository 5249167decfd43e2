"""The rep's drafting preferences in the LangGraph store, namespaced per tenant and rep.

Only the rep's explicit, approved request changes them; account facts are never
memorised here.
"""

from __future__ import annotations

from typing import Any

from langgraph.store.base import BaseStore
from pydantic import BaseModel, ConfigDict, Field

from copilot.identity import RepIdentity
from copilot.tools.schemas import EmailTone, UpdatePreferencesArgs

PREFERENCES_KEY = "preferences"


class Preferences(BaseModel):
    """Tone, signature and follow-up cadence used when drafting."""

    model_config = ConfigDict(extra="ignore")

    email_tone: EmailTone = "friendly"
    signature: str = ""
    followup_cadence_days: int = Field(default=7, ge=1, le=90)


def namespace(identity: RepIdentity) -> tuple[str, ...]:
    """The store namespace of one rep's preferences."""
    return (identity.tenant_id, identity.aad_object_id, "preferences")


async def load_preferences(store: BaseStore, identity: RepIdentity) -> Preferences:
    """The rep's preferences (defaults if never set)."""
    item = await store.aget(namespace(identity), PREFERENCES_KEY)
    return Preferences.model_validate(item.value) if item is not None else Preferences()


def apply_update(current: Preferences, args: UpdatePreferencesArgs) -> Preferences:
    """The preferences after an update (pure)."""
    if args.reset:
        return Preferences()
    changes: dict[str, Any] = args.model_dump(exclude={"reset"}, exclude_none=True)
    return current.model_copy(update=changes)


async def save_preferences(store: BaseStore, identity: RepIdentity, prefs: Preferences) -> None:
    """Persist the rep's preferences."""
    await store.aput(namespace(identity), PREFERENCES_KEY, prefs.model_dump())


GREETINGS = {"friendly": "Hi {name},", "formal": "Dear {name},", "concise": "{name},"}
CLOSINGS = {"friendly": "Thanks,", "formal": "Kind regards,", "concise": "Best,"}


def compose_email(body: str, *, contact_name: str, rep_name: str, prefs: Preferences) -> str:
    """A draft's full text: greeting and closing in the rep's tone, then their signature (pure)."""
    first_name = contact_name.split()[0] if contact_name.strip() else "there"
    signature = prefs.signature.strip() or rep_name
    parts = [
        GREETINGS[prefs.email_tone].format(name=first_name),
        "",
        body.strip(),
        "",
        CLOSINGS[prefs.email_tone],
        signature,
    ]
    return "\n".join(parts)
