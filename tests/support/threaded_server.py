"""Serve an ASGI app with uvicorn on a free loopback port, in a thread of its own.

A thread of its own (its own event loop), so the server keeps answering whatever the
test's event loop is doing, and scripted behaviour can be plain functions.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp


class ThreadedServer:
    """``with ThreadedServer(app) as server: server.url``: started on enter, stopped on exit."""

    def __init__(self, app: ASGIApp):
        self._app = app
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2, access_log=False
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        while not server.started and self._thread.is_alive():
            time.sleep(0.01)
        if not server.started:
            raise RuntimeError("the test HTTP server did not start")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> ThreadedServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
