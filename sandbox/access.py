"""A user's effective CRM access: the directory's licence flag, unless overridden at runtime.

``PUT /admin/users/{handle}/crm-access`` stores an override in the sandbox database
(like an admin removing a user from the CRM app's assignment in Entra ID). The
identity provider consults it before issuing CRM tokens (on-behalf-of) and the MCP
endpoint before honouring a CRM token that was issued earlier.
"""

from __future__ import annotations

from pathlib import Path

from sandbox import db
from sandbox.directory import User


def crm_access_enabled(db_path: Path, user: User) -> bool:
    """Whether ``user`` may use the CRM now (override first, then ``User.crm_access``)."""
    override = db.crm_access_override(db_path, user.id)
    return user.crm_access if override is None else override
