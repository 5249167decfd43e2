"""The jobs the offline model can give a tool (roles), and what a tool must look like to do one.

The offline model knows no tool by name. It knows what it wants done ("find accounts by
name", "log an activity") and recognises the bound tool that does it from the tool's
argument names, its MCP read-only annotation and the words of its name, title and
description. A role's argument names are the contract: the planner fills in exactly those.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Kind = Literal["account", "opportunity", "contact", "activity"]
"""The kinds of CRM record the planner reasons about."""

ReadRole = Literal[
    "account_search",
    "account_detail",
    "opportunity_list",
    "opportunity_detail",
    "activity_list",
    "contact_list",
    "pipeline",
    "preferences_read",
    "write_history",
    "knowledge_search",
]
WriteRole = Literal["activity_log", "opportunity_update", "email_draft", "preferences_update", "write_undo"]
Role = ReadRole | WriteRole

READ_ROLES: tuple[ReadRole, ...] = get_args(ReadRole)
WRITE_ROLES: tuple[WriteRole, ...] = get_args(WriteRole)

# Word stems that say what a tool is about, by subject. A tool whose name speaks only of
# another subject ("..._contacts" for an account lookup) is not a candidate.
ACCOUNT_WORDS = ("account", "compan", "customer", "client")
OPPORTUNITY_WORDS = ("opportunit", "deal")
ACTIVITY_WORDS = ("activit", "interaction")
CONTACT_WORDS = ("contact", "people", "stakeholder")
PIPELINE_WORDS = ("pipeline", "forecast")
PREFERENCE_WORDS = ("preference", "setting")
EMAIL_WORDS = ("email", "mail", "draft", "followup")
KNOWLEDGE_WORDS = ("knowledge", "playbook", "guidance", "document")
LOG_WORDS = ("log", *ACTIVITY_WORDS)
HISTORY_WORDS = ("write", "change", "undo")
UNDO_WORDS = ("undo", "revert", "reverse")
SUBJECT_WORDS: tuple[tuple[str, ...], ...] = (
    ACCOUNT_WORDS,
    OPPORTUNITY_WORDS,
    ACTIVITY_WORDS,
    CONTACT_WORDS,
    PIPELINE_WORDS,
    PREFERENCE_WORDS,
    EMAIL_WORDS,
    KNOWLEDGE_WORDS,
)

_PAGING = frozenset({"limit", "cursor", "query", "page", "offset"})


@dataclass(frozen=True)
class RoleSpec:
    """What a bound tool needs to serve a role."""

    read_only: bool
    """Read roles need a tool annotated ``readOnlyHint: True``; every other tool is a write."""
    topics: tuple[str, ...]
    """Word stems its name, title or description must use (at least one)."""
    needs: frozenset[str] = frozenset()
    """Argument names it must take, all of them."""
    needs_any: frozenset[str] = frozenset()
    """Argument names of which it must take at least one (when given)."""
    excludes: frozenset[str] = frozenset()
    """Argument names it must not take (a one-record read has no paging)."""
    single_record: bool = False
    """Its only required argument (if any) is one of ``needs``: it reads one record by id."""
    no_required: bool = False
    """It must be callable without arguments."""
    kind: Kind | None = None
    """The kind of record its result describes (at the top level, or as its ``items``)."""


ROLES: dict[Role, RoleSpec] = {
    "account_search": RoleSpec(True, ACCOUNT_WORDS, needs=frozenset({"query"}), kind="account"),
    "account_detail": RoleSpec(
        True,
        ACCOUNT_WORDS,
        needs=frozenset({"account_id"}),
        excludes=_PAGING,
        single_record=True,
        kind="account",
    ),
    "opportunity_list": RoleSpec(
        True,
        OPPORTUNITY_WORDS,
        needs=frozenset({"account_id"}),
        needs_any=frozenset({"owner", "stage", "closing_after", "closing_before"}),
        kind="opportunity",
    ),
    "opportunity_detail": RoleSpec(
        True,
        OPPORTUNITY_WORDS,
        needs=frozenset({"opportunity_id"}),
        excludes=_PAGING,
        single_record=True,
        kind="opportunity",
    ),
    "activity_list": RoleSpec(True, ACTIVITY_WORDS, needs=frozenset({"account_id"}), kind="activity"),
    "contact_list": RoleSpec(True, CONTACT_WORDS, needs=frozenset({"account_id"}), kind="contact"),
    "pipeline": RoleSpec(True, PIPELINE_WORDS, needs_any=frozenset({"period_start", "period_end", "scope"})),
    "preferences_read": RoleSpec(True, PREFERENCE_WORDS, no_required=True),
    # The rep's own recent executed changes (to find the one "undo my last change" means).
    "write_history": RoleSpec(
        True,
        HISTORY_WORDS,
        needs=frozenset({"limit"}),
        excludes=frozenset({"account_id", "opportunity_id", "query", "owner", "stage"}),
        no_required=True,
    ),
    "knowledge_search": RoleSpec(True, KNOWLEDGE_WORDS, needs=frozenset({"query"})),
    "activity_log": RoleSpec(
        False, LOG_WORDS, needs=frozenset({"subject", "notes", "account_id"}), kind="activity"
    ),
    "opportunity_update": RoleSpec(
        False,
        OPPORTUNITY_WORDS,
        needs=frozenset({"opportunity_id"}),
        needs_any=frozenset({"stage", "close_date", "amount", "next_step"}),
        kind="opportunity",
    ),
    "email_draft": RoleSpec(False, EMAIL_WORDS, needs=frozenset({"contact_id", "body"})),
    "preferences_update": RoleSpec(
        False,
        PREFERENCE_WORDS,
        needs_any=frozenset({"email_tone", "signature", "followup_cadence_days", "reset"}),
    ),
    "write_undo": RoleSpec(False, UNDO_WORDS, needs=frozenset({"audit_id"})),
}

DETAIL_ROLES: dict[Kind, ReadRole] = {"account": "account_detail", "opportunity": "opportunity_detail"}
"""The read that fetches one record of a kind by its id (used to check an id the rep typed)."""
DETAIL_ARGUMENT: dict[Kind, str] = {"account": "account_id", "opportunity": "opportunity_id"}


def kind_of_key(key: str) -> Kind | None:
    """The record kind a JSON key names (``account``, ``opportunity_ids``, ``contacts``), if any."""
    stem = key.lower().removesuffix("_ids").removesuffix("_id")
    for kind, word in _KEY_STEMS:
        if stem.startswith(word):
            return kind
    return None


_KEY_STEMS: tuple[tuple[Kind, str], ...] = (
    ("account", "account"),
    ("opportunity", "opportunit"),
    ("contact", "contact"),
    ("activity", "activit"),
)
