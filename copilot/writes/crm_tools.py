"""The CRM's MCP tools the write tools call by name: one definition, read by the executors and
by the deployment preflight (``python -m copilot doctor`` checks the CRM lists each of them)."""

from __future__ import annotations

from typing import Final

GET_ACCOUNT: Final = "get_account"
GET_OPPORTUNITY: Final = "get_opportunity"
GET_CONTACT: Final = "get_contact"
"""Reads (the CRM must declare them ``readOnlyHint``)."""

UPSERT_ACTIVITY: Final = "upsert_activity"
UPDATE_OPPORTUNITY: Final = "update_opportunity"
VOID_ACTIVITY: Final = "void_activity"
"""Writes (called only by an approved write tool's executor, with the ``crm.write`` token)."""
