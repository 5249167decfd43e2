"""The organisation's customisations an administrator makes for the copilot, and who may make them.

Two things a real environment has to be given before the copilot works, which the sandbox
therefore lets an admin create rather than only seeding them:

* the key column (``SandboxSettings.dataverse_activity_key``, default ``new_copilotkey``) on the
  activity tables and on ``opportunity``, and the alternate key over it on the activity tables
  (``POST EntityDefinitions(...)/Attributes`` and ``.../Keys``);
* the ``allowedmcpclient`` rows: which client apps may call ``/api/mcp``.

Both start from the knobs: ``dataverse_key_column_present`` (default true: present) and
``dataverse_allowed_mcp_clients`` (default: the product's app). Setting the knobs again rebuilds
them from the knobs, so a test that flips a knob starts from a known organisation.

Only an administrator changes them: the sandbox's managers play Dataverse's System
Administrator role (anyone else gets 403 ``PrivilegeDenied``).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from sandbox.config import SandboxSettings
from sandbox.dataverse import errors
from sandbox.dataverse.ids import NAMESPACE, guid_for
from sandbox.directory import User
from sandbox.knobs import KnobState

ACTIVITY_KEY_TABLES = ("phonecall", "task", "appointment")
"""Tables whose alternate key is the key column (exactly-once creates)."""
KEY_COLUMN_TABLES = (*ACTIVITY_KEY_TABLES, "opportunity")
"""Tables that carry the key column (on ``opportunity``: the key of the last copilot update)."""
KEY_COLUMN_MAX_LENGTH = 100


def is_admin(user: User) -> bool:
    """Whether ``user`` holds the System Administrator role here (the sandbox's managers)."""
    return user.role == "manager"


def require_admin(user: User, privilege: str) -> None:
    """403 as Dataverse words a missing privilege, unless ``user`` is an administrator."""
    if not is_admin(user):
        raise errors.privilege_denied(
            f"Principal user (Id={guid_for('systemuser', user.id)}, type=8) is missing {privilege}"
            " privilege: it takes the System Administrator (or System Customizer) security role"
        )


def client_row_id(application_id: str) -> str:
    """The ``allowedmcpclientid`` of an app's row (deterministic, as every sandbox GUID)."""
    return str(uuid.uuid5(NAMESPACE, f"allowedmcpclient:{application_id.lower()}"))


@dataclass
class _State:
    generation: int
    columns: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``allowedmcpclientid`` → the row."""


class OrgConfig:
    """The key column, its alternate keys and the allowed MCP clients of the one organisation."""

    def __init__(self, settings: SandboxSettings, knobs: KnobState) -> None:
        self._settings = settings
        self._knobs = knobs
        self._lock = threading.Lock()
        self._state = self._from_knobs()

    @property
    def key_column(self) -> str:
        return self._settings.dataverse_activity_key

    def _from_knobs(self) -> _State:
        knobs = self._knobs.knobs
        state = _State(generation=self._knobs.generation)
        if knobs.dataverse_key_column_present:
            state.columns = set(KEY_COLUMN_TABLES)
            state.keys = set(ACTIVITY_KEY_TABLES)
        allowed = knobs.dataverse_allowed_mcp_clients
        for app_id in [self._settings.bot_app_id] if allowed is None else allowed:
            row_id = client_row_id(app_id)
            state.clients[row_id] = {
                "allowedmcpclientid": row_id,
                "applicationid": app_id,
                "name": f"Client app {app_id}",
                "uniquename": f"new_client_{app_id.replace('-', '')}",
                "isenabled": True,
            }
        return state

    def _current(self) -> _State:
        # Called under the lock: a knob change since the last look rebuilds from the knobs.
        if self._state.generation != self._knobs.generation:
            self._state = self._from_knobs()
        return self._state

    # --- the key column and its alternate key ------------------------------------------

    def has_column(self, table: str) -> bool:
        with self._lock:
            return table in self._current().columns

    def has_key(self, table: str) -> bool:
        with self._lock:
            return table in self._current().keys

    def add_column(self, caller: User, table: str, body: dict[str, Any]) -> str:
        """Create the key column on ``table`` from a ``StringAttributeMetadata`` body; its MetadataId."""
        require_admin(caller, "prvCreateAttribute")
        kind = str(body.get("@odata.type", "")).lstrip("#")
        if kind != "Microsoft.Dynamics.CRM.StringAttributeMetadata":
            raise errors.bad_request(
                "Only string columns (@odata.type Microsoft.Dynamics.CRM.StringAttributeMetadata) are"
                " created here."
            )
        schema_name = body.get("SchemaName")
        if not isinstance(schema_name, str) or schema_name.lower() != self.key_column:
            raise errors.bad_request(
                f"This environment only lets the copilot's key column ({self.key_column}) be created;"
                f" got SchemaName {schema_name!r}."
            )
        if table not in KEY_COLUMN_TABLES:
            raise errors.bad_request(
                f"The key column belongs on {', '.join(KEY_COLUMN_TABLES)}, not {table}."
            )
        max_length = body.get("MaxLength", KEY_COLUMN_MAX_LENGTH)
        if not isinstance(max_length, int) or not 1 <= max_length <= 4000:
            raise errors.bad_request("MaxLength must be a whole number from 1 to 4000.")
        with self._lock:
            state = self._current()
            if table in state.columns:
                # Dataverse refuses a second column of the same name; its fault code is not
                # documented, so the generic invalid-argument code stands in for it.
                raise errors.bad_request(f"An attribute named {self.key_column} already exists on {table}.")
            state.columns.add(table)
        return _metadata_id(table, self.key_column)

    def add_key(self, caller: User, table: str, body: dict[str, Any]) -> str:
        """Create the alternate key over the key column (``EntityKeyMetadata``); its MetadataId."""
        require_admin(caller, "prvCreateEntityKey")
        attributes = body.get("KeyAttributes")
        if not isinstance(body.get("SchemaName"), str) or not body["SchemaName"]:
            raise errors.bad_request("An alternate key needs a SchemaName.")
        if attributes != [self.key_column]:
            raise errors.bad_request(
                f"This environment only lets the alternate key over [{self.key_column!r}] be created;"
                f" got KeyAttributes {attributes!r}."
            )
        if table not in ACTIVITY_KEY_TABLES:
            raise errors.bad_request(f"The alternate key belongs on {', '.join(ACTIVITY_KEY_TABLES)}.")
        with self._lock:
            state = self._current()
            if table not in state.columns:
                raise errors.bad_request(
                    f"The attribute {self.key_column} does not exist on {table}: create the column first."
                )
            if table in state.keys:
                raise errors.bad_request(
                    f"An alternate key over {self.key_column} already exists on {table}."
                )
            state.keys.add(table)
        return _metadata_id(table, "key", self.key_column)

    # --- allowed MCP clients -------------------------------------------------------------

    def clients(self, caller: User) -> list[dict[str, Any]]:
        """Every ``allowedmcpclient`` row (an organisation-owned table only admins read here)."""
        require_admin(caller, "prvReadallowedmcpclient")
        with self._lock:
            return [dict(row) for row in self._current().clients.values()]

    def allowed(self, application_id: str | None) -> bool:
        """Whether an app may call ``/api/mcp``: it has a row with ``isenabled`` true."""
        if application_id is None:
            return False
        with self._lock:
            rows = self._current().clients.values()
            return any(r["isenabled"] and r["applicationid"].lower() == application_id.lower() for r in rows)

    def create_client(self, caller: User, body: dict[str, Any]) -> dict[str, Any]:
        """Add a client app's row (``applicationid``, ``name``, ``uniquename``, ``isenabled``)."""
        require_admin(caller, "prvCreateallowedmcpclient")
        unknown = set(body) - {"applicationid", "name", "uniquename", "isenabled"}
        if unknown:
            raise errors.bad_request(f"Unknown columns for allowedmcpclient: {', '.join(sorted(unknown))}.")
        app_id = body.get("applicationid")
        if not isinstance(app_id, str) or not 1 <= len(app_id) <= 100:
            raise errors.bad_request("applicationid (a string of up to 100 characters) is required.")
        enabled = body.get("isenabled", False)  # the column's default is false
        if not isinstance(enabled, bool):
            raise errors.bad_request("isenabled must be true or false.")
        row_id = client_row_id(app_id)
        row = {
            "allowedmcpclientid": row_id,
            "applicationid": app_id,
            "name": str(body.get("name") or app_id),
            "uniquename": str(body.get("uniquename") or f"new_client_{app_id.replace('-', '')}"),
            "isenabled": enabled,
        }
        with self._lock:
            state = self._current()
            if row_id in state.clients:
                raise errors.duplicate_key()
            state.clients[row_id] = row
        return dict(row)

    def update_client(self, caller: User, row_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Change a row's ``isenabled`` (or its name)."""
        require_admin(caller, "prvWriteallowedmcpclient")
        unknown = set(body) - {"name", "isenabled"}
        if unknown:
            raise errors.bad_request(f"Columns that cannot be changed here: {', '.join(sorted(unknown))}.")
        if "isenabled" in body and not isinstance(body["isenabled"], bool):
            raise errors.bad_request("isenabled must be true or false.")
        with self._lock:
            row = self._current().clients.get(row_id)
            if row is None:
                raise errors.not_found("allowedmcpclient", row_id)
            row.update({k: v for k, v in body.items() if k in ("name", "isenabled")})
            return dict(row)


def _metadata_id(*parts: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "metadata:" + ":".join(parts)))
