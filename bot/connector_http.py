"""The Bot Connector's HTTP pipeline on aiohttp: msrest's policies, sent on the event loop.

botbuilder's ``ConnectorClient`` is a msrest ``ServiceClientAsync`` whose default sender is
``requests`` run in the default thread executor: a thread hop per request, plus requests'
per-request merging of environment settings (about an eighth of a queue worker's CPU at
50 concurrent turns, two replies each). :func:`aiohttp_pipeline` builds the same pipeline
(user agent, credentials, ``RawDeserializer``, HTTP logger, in msrest's order) ending in
:class:`AioHTTPConnectorSender`, which sends with a shared ``aiohttp.ClientSession`` and
keeps what msrest's requests sender does with the client's configuration:

* **credentials**: ``signed_session`` applied to the request's headers, so the
  ``Authorization`` header is set, or removed (no app id: local mode sends none), exactly
  as on requests' session. The token is whatever the credentials hold: the connector
  factory refreshes it off the loop before handing a client out.
* **retries**: msrest's ``ClientRetryPolicy`` (a urllib3 ``Retry``), read from
  ``config.retry_policy``: 3 retries in all (3 for connection failures, 3 for read
  failures); any status msrest lists (408, 500, 502-504, 506 and above), and 413/429/503
  when they carry ``Retry-After``; the server's ``Retry-After`` honoured (capped as
  urllib3 caps it), else urllib3's backoff (none before the first retry, then
  ``backoff_factor * 2**(n-1)``, capped). Status retries apply to the methods msrest
  lists, POST included; urllib3 2 no longer reads msrest's ``method_whitelist``, so
  through requests a POST (every new reply) was never retried on a 429 or 503: that is
  msrest's intended behaviour restored, not a change of policy. Read failures (the
  request may have been processed) are retried only for urllib3's idempotent methods,
  as before, so a reply is never posted twice because its answer was slow. Retries
  exhausted on a status raise ``ClientRequestError`` as through requests.
* **connection**: ``config.connection.timeout`` as requests applies it (to connecting
  and to each read, not to the whole exchange), ``verify`` (``True``: the
  ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` bundle when the environment is trusted, else
  certifi's, as requests does; ``False``; or a CA bundle path) and ``cert``; proxies
  from ``config.proxies``, else from the environment (``HTTPS_PROXY``, ``NO_PROXY``, ...,
  read once per host) when ``config.proxies.use_env_settings``; redirects per ``config.redirect_policy``, followed for GET and HEAD
  only (msrest refuses requests' browser-style 301/302 rewrite of other methods).

Responses are read whole (every Bot Connector operation asks for ``stream=False``).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import re
import ssl
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import certifi
from aiohttp.helpers import get_env_proxy_for_url
from msrest.exceptions import ClientRequestError
from msrest.pipeline import (
    AsyncHTTPPolicy,
    AsyncHTTPSender,
    AsyncPipeline,
    Request,
    Response,
    SansIOHTTPPolicy,
)
from msrest.pipeline.universal import RawDeserializer
from msrest.universal_http import ClientRequest
from msrest.universal_http.async_abc import AsyncClientResponse
from multidict import CIMultiDict
from yarl import URL

logger = logging.getLogger(__name__)

_RETRY_AFTER_SECONDS = re.compile(r"^\s*[0-9]+\s*$")


@dataclass(frozen=True)
class RetryRules:
    """msrest's retry policy (a urllib3 ``Retry``) as plain numbers, read once per client."""

    total: int
    connect: int | None
    read: int | None
    status: int | None
    backoff_factor: float
    backoff_max: float
    status_forcelist: frozenset[int]
    retry_after_statuses: frozenset[int]
    respect_retry_after: bool
    retry_after_max: float
    raise_on_status: bool
    status_methods: frozenset[str] | None
    """Methods a status is retried for (None: any, as urllib3's ``allowed_methods=None``)."""
    read_methods: frozenset[str] | None
    """Methods a read failure is retried for (None: any)."""

    @classmethod
    def from_config(cls, config: Any) -> RetryRules:
        """The rules of ``config.retry_policy`` (msrest's ``ClientRetryPolicy``)."""
        retry = config.retry_policy()
        total = retry.total if isinstance(retry.total, int) else 0
        allowed = (
            None if retry.allowed_methods is None else frozenset(m.upper() for m in retry.allowed_methods)
        )
        # msrest still sets the urllib3 1 name; urllib3 2 ignores it (module docstring).
        declared = getattr(retry, "method_whitelist", None)
        return cls(
            total=total,
            connect=retry.connect,
            read=retry.read,
            status=retry.status,
            backoff_factor=float(retry.backoff_factor),
            backoff_max=float(retry.backoff_max),
            status_forcelist=frozenset(retry.status_forcelist or ()),
            retry_after_statuses=frozenset(retry.RETRY_AFTER_STATUS_CODES),
            respect_retry_after=bool(retry.respect_retry_after_header),
            retry_after_max=float(retry.retry_after_max),
            raise_on_status=bool(retry.raise_on_status),
            status_methods=frozenset(m.upper() for m in declared) if declared else allowed,
            read_methods=allowed,
        )

    def retries_status(self, method: str, status: int, has_retry_after: bool) -> bool:
        """urllib3's ``Retry.is_retry`` over msrest's declared methods."""
        if self.status_methods is not None and method not in self.status_methods:
            return False
        if status in self.status_forcelist:
            return True
        return bool(
            self.total
            and self.respect_retry_after
            and has_retry_after
            and status in self.retry_after_statuses
        )

    def retries_read(self, method: str) -> bool:
        """Whether a failure after the request went out may be retried (urllib3's method check)."""
        return self.read_methods is None or method in self.read_methods

    def backoff(self, consecutive_errors: int) -> float:
        """urllib3's ``Retry.get_backoff_time`` after ``consecutive_errors`` failed attempts."""
        if consecutive_errors <= 1:
            return 0.0
        return max(0.0, min(self.backoff_max, self.backoff_factor * (2 ** (consecutive_errors - 1))))

    def retry_after(self, headers: Mapping[str, str]) -> float | None:
        """The server's ``Retry-After`` in seconds (urllib3's parsing and cap); None if absent or unreadable."""
        value = headers.get("Retry-After")
        if not value or not self.respect_retry_after:
            return None
        if _RETRY_AFTER_SECONDS.match(value):
            seconds = float(int(value))
        else:
            parsed = email.utils.parsedate_tz(value)
            if parsed is None:
                return None
            seconds = email.utils.mktime_tz(parsed) - time.time()
        return min(max(seconds, 0.0), self.retry_after_max)


class _Budget:
    """urllib3's retry counters for one request: any going below zero ends the retries."""

    def __init__(self, rules: RetryRules):
        self.total: int = rules.total
        self.connect = rules.connect
        self.read = rules.read
        self.status = rules.status
        self.errors = 0

    def spend(self, kind: str) -> bool:
        """Count one more failed attempt of ``kind``; whether another attempt is allowed."""
        self.errors += 1
        self.total -= 1
        left = getattr(self, kind)
        if left is not None:
            left -= 1
            setattr(self, kind, left)
        return self.total >= 0 and (left is None or left >= 0)


class ConnectorResponse(AsyncClientResponse):
    """A Bot Connector response, its body read (msrest's ``ClientResponse`` interface)."""

    def __init__(self, request: ClientRequest, response: aiohttp.ClientResponse, body: bytes):
        super().__init__(request, response)
        self.status_code = response.status
        self.headers = CIMultiDict(response.headers)
        self.reason = response.reason
        self._body = body

    def body(self) -> bytes:
        return self._body

    def raise_for_status(self) -> None:
        if self.status_code is not None and self.status_code >= 400:
            raise ClientRequestError(f"Received status code {self.status_code}")


class _HeadersAsSession:
    """What ``AppCredentials.signed_session`` touches of a ``requests.Session``: its headers."""

    def __init__(self, headers: MutableMapping[str, str]):
        self.headers = headers


class SignedHeadersPolicy(SansIOHTTPPolicy):
    """msrest's credentials policy without requests: ``signed_session`` applied to the request's headers."""

    def __init__(self, credentials: Any):
        self._credentials = credentials

    def on_request(self, request: Request, **kwargs: Any) -> None:
        self._credentials.signed_session(_HeadersAsSession(request.http_request.headers))


class SslContexts:
    """One SSL context per ``verify``/``cert`` setting, built once (loading a CA bundle costs CPU)."""

    def __init__(self) -> None:
        self._contexts: dict[tuple[Any, Any, bool], ssl.SSLContext | bool] = {}

    def get(self, verify: Any, cert: Any, trust_env: bool) -> ssl.SSLContext | bool:
        key = (verify, tuple(cert) if isinstance(cert, list) else cert, trust_env)
        context = self._contexts.get(key)
        if context is None:
            context = self._contexts[key] = self._build(verify, cert, trust_env)
        return context

    @staticmethod
    def _build(verify: Any, cert: Any, trust_env: bool) -> ssl.SSLContext | bool:
        if verify is False and not cert:
            return False
        if verify is True or verify is None:
            # What requests verifies against (its merge_environment_settings, then certifi).
            env = (
                (os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE"))
                if trust_env
                else None
            )
            verify = env or certifi.where()
        if verify is False:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif os.path.isdir(str(verify)):
            context = ssl.create_default_context(capath=str(verify))
        else:
            context = ssl.create_default_context(cafile=str(verify))
        if cert:
            if isinstance(cert, (tuple, list)):
                context.load_cert_chain(cert[0], cert[1])
            else:
                context.load_cert_chain(cert)
        return context


def _timeout(value: Any) -> aiohttp.ClientTimeout:
    """requests' ``timeout`` (seconds, or a (connect, read) pair) as aiohttp's socket timeouts."""
    if isinstance(value, (tuple, list)):
        connect, read = value
    else:
        connect = read = value
    return aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)


def _scheme_and_host(url: str) -> tuple[str, str]:
    parsed = URL(url)
    return (parsed.scheme.lower(), parsed.host or "")


def _explicit_proxy(scheme: str, host: str, proxies: Mapping[str, str]) -> str | None:
    """requests' ``select_proxy`` over ``config.proxies``."""
    for key in (f"{scheme}://{host}", scheme, f"all://{host}", "all"):
        if key in proxies:
            return proxies[key]
    return None


class ConnectorHttp:
    """The HTTP transport every connector client of a process shares: one aiohttp session
    (made on the running loop at first use), SSL contexts and proxy look-ups, each built once.

    The session does not trust the environment itself: aiohttp would then read ``~/.netrc``
    and the proxy variables in a worker thread on every request (two thread hops, the very
    cost this module removes). The proxy variables are read here instead, once per scheme
    and host (the environment does not change under a running process). requests would also
    have sent a ``~/.netrc`` login for the host in place of the bearer token; never wanted.
    """

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._ssl = SslContexts()
        self._env_proxies: dict[tuple[str, str], tuple[URL, aiohttp.BasicAuth | None] | None] = {}

    @property
    def session(self) -> aiohttp.ClientSession:
        """The shared session (made now if there is none, on the running loop)."""
        if self._session is None or self._session.closed:
            # No connection limit, as requests' pools (which never block; they keep 10 per host).
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), trust_env=False)
        return self._session

    def ssl_for(self, url: str, verify: Any, cert: Any, trust_env: bool) -> ssl.SSLContext | bool:
        """What to give aiohttp's ``ssl`` for ``url`` (nothing to build for plain HTTP)."""
        if not url.lower().startswith("https:"):
            return True
        return self._ssl.get(verify, cert, trust_env)

    def proxy_for(
        self, url: str, proxies: Mapping[str, str], trust_env: bool
    ) -> tuple[str | URL | None, aiohttp.BasicAuth | None]:
        """The proxy for ``url``: ``config.proxies``, else the environment's if trusted (as requests)."""
        scheme, host = _scheme_and_host(url)
        explicit = _explicit_proxy(scheme, host, proxies) if proxies else None
        if explicit is not None or not trust_env:
            return explicit, None
        key = (scheme, host)
        if key not in self._env_proxies:
            try:
                self._env_proxies[key] = get_env_proxy_for_url(URL(url))
            except LookupError:
                self._env_proxies[key] = None
        found = self._env_proxies[key]
        return (found[0], found[1]) if found is not None else (None, None)

    async def close(self) -> None:
        """Close the session; a later request opens a new one."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class AioHTTPConnectorSender(AsyncHTTPSender):
    """Sends a connector client's requests with a shared ``aiohttp`` session (module docstring).

    The transport is the process's (``bot.connectors`` closes it): entering or leaving this
    sender's context does not close it.
    """

    def __init__(self, http: ConnectorHttp, config: Any):
        self._http = http
        self._config = config
        self._retry = RetryRules.from_config(config)

    async def __aenter__(self) -> AioHTTPConnectorSender:
        return self

    async def __aexit__(self, *exc_details: Any) -> None:
        return None

    def build_context(self) -> None:
        return None

    def _request_kwargs(self, http: ClientRequest, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        config = self._config
        if http.files:
            raise ClientRequestError("multipart uploads are not sent by the aiohttp Bot Connector sender")
        connection = config.connection
        trust_env = bool(config.proxies.use_env_settings)
        method = http.method.upper()
        headers = dict(config.headers)
        headers.update(http.headers)
        data = http.data
        if isinstance(data, str):
            data = data.encode("utf-8")
            if "Content-Length" in headers:  # msrest counted characters
                headers["Content-Length"] = str(len(data))
        allow = bool(kwargs.get("allow_redirects", bool(config.redirect_policy)))
        proxy, proxy_auth = self._http.proxy_for(
            http.url, kwargs.get("proxies") or config.proxies.proxies, trust_env
        )
        return {
            "headers": headers,
            "data": data,
            "timeout": _timeout(kwargs.get("timeout", connection.timeout)),
            "ssl": self._http.ssl_for(
                http.url,
                kwargs.get("verify", connection.verify),
                kwargs.get("cert", connection.cert),
                trust_env,
            ),
            "proxy": proxy,
            "proxy_auth": proxy_auth,
            "allow_redirects": allow and method in ("GET", "HEAD"),
            "max_redirects": int(config.redirect_policy()),
        }

    async def send(self, request: Request, **kwargs: Any) -> Response:
        http: ClientRequest = request.http_request
        method = http.method.upper()
        options = self._request_kwargs(http, kwargs)
        rules, budget = self._retry, _Budget(self._retry)
        while True:
            try:
                async with self._http.session.request(method, http.url, **options) as raw:
                    body = await raw.read()
                    response = ConnectorResponse(http, raw, body)
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                # Nothing reached the server: safe to send again, whatever the method.
                if not budget.spend("connect"):
                    raise ClientRequestError("Error occurred in request.", inner_exception=exc) from exc
                await self._sleep(rules.backoff(budget.errors), method, http.url, exc)
                continue
            except (TimeoutError, aiohttp.ClientError) as exc:
                if not rules.retries_read(method) or not budget.spend("read"):
                    raise ClientRequestError("Error occurred in request.", inner_exception=exc) from exc
                await self._sleep(rules.backoff(budget.errors), method, http.url, exc)
                continue
            status = response.status_code or 0
            has_retry_after = bool(response.headers.get("Retry-After"))
            if not rules.retries_status(method, status, has_retry_after):
                return Response(request, response)
            if not budget.spend("status"):
                if rules.raise_on_status:
                    raise ClientRequestError(
                        f"Error occurred in request: too many {status} responses from {http.url}"
                    )
                return Response(request, response)
            delay = rules.retry_after(response.headers)
            await self._sleep(delay if delay else rules.backoff(budget.errors), method, http.url, status)

    @staticmethod
    async def _sleep(seconds: float, method: str, url: str, cause: object) -> None:
        logger.info("retrying %s %s in %.1f s after %s", method, url, seconds, cause)
        if seconds > 0:
            await asyncio.sleep(seconds)


def aiohttp_pipeline(config: Any, http: ConnectorHttp) -> AsyncPipeline:
    """msrest's default async pipeline for ``config`` (a connector client's), sending with aiohttp."""
    policies: list[Any] = [config.user_agent_policy, RawDeserializer(), config.http_logger_policy]
    credentials = config.credentials
    if credentials:
        # As msrest's _create_default_pipeline: a policy is used as is, old-style credentials signed.
        if isinstance(credentials, (AsyncHTTPPolicy, SansIOHTTPPolicy)):
            policies.insert(1, credentials)
        else:
            policies.insert(1, SignedHeadersPolicy(credentials))
    return AsyncPipeline(policies, AioHTTPConnectorSender(http, config))
