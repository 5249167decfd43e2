"""TLS trust, built once per process (pure apart from reading the CA bundle).

Building an ``ssl.SSLContext`` loads a whole CA bundle (tens of milliseconds), so every
client of the process (MCP sessions, the mailbox, the identity provider, document sources)
shares one per CA file. Below every package that makes HTTPS calls, so none of them imports
another's transport for it.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def ssl_context(ca_file: str | None = None) -> ssl.SSLContext:
    """The TLS trust for ``ca_file`` (a CA bundle), built once per process.

    ``None`` is httpx's default trust (``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, else certifi),
    what the CRM and the mailbox were always verified with. A context is only read once
    built (never changed), so connections and threads may share it.
    """
    if ca_file is not None:
        return ssl.create_default_context(cafile=ca_file)
    return httpx.create_ssl_context()
