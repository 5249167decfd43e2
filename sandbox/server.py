"""Serve the sandbox app on loopback: plain HTTP and HTTPS (own CA), one process, one state."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Generator
from typing import Any

import uvicorn

from sandbox.app import build_app
from sandbox.config import SandboxSettings
from sandbox.identity.ca import ensure_tls_material
from sandbox.knobs import Knobs

_SHUTDOWN_GRACE_SECONDS = 1


class _Server(uvicorn.Server):
    # Two servers share one event loop; the signal handling below stops both.
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve(
    settings: SandboxSettings, knobs: Knobs | None = None, on_ready: Callable[[], None] | None = None
) -> None:
    """Run until SIGINT/SIGTERM. The HTTP listener owns the app's lifespan (MCP sessions)."""
    tls = ensure_tls_material(settings)
    app = build_app(settings, knobs).asgi

    def config(port: int, **extra: Any) -> uvicorn.Config:
        # An MCP client may hold a session stream open for ever; without a bound, uvicorn's
        # graceful shutdown waits on it and a stop (Ctrl-C, SIGTERM) hangs.
        return uvicorn.Config(
            app,
            host=settings.host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=_SHUTDOWN_GRACE_SECONDS,
            **extra,
        )

    http = _Server(config(settings.http_port))
    https = _Server(
        config(
            settings.https_port,
            lifespan="off",
            ssl_certfile=str(tls.server_cert),
            ssl_keyfile=str(tls.server_key),
        )
    )
    loop = asyncio.get_running_loop()

    def stop() -> None:
        http.should_exit = True
        https.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)

    async def announce() -> None:
        while not (http.started and https.started):
            if http.should_exit:
                return
            await asyncio.sleep(0.05)
        if on_ready is not None:
            on_ready()

    await asyncio.gather(http.serve(), https.serve(), announce())
