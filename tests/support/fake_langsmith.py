"""A LangSmith-shaped HTTP endpoint that stores what the LangSmith client sends (LangSmith stand-in).

Speaks the ingest API as the installed ``langsmith`` client uses it:

* ``GET /info`` (the server's capabilities: multipart ingest, zstd compression);
* ``POST /runs/multipart`` (``multipart/form-data``, zstd-compressed or not: parts
  ``post.<id>``, ``patch.<id>``, ``post.<id>.inputs`` / ``.outputs`` / ``.extra`` / ``.error``
  / ``.events`` / ``.serialized``, ``feedback.<id>``), ``POST /runs/batch``, ``POST /runs``
  and ``PATCH /runs/<id>``;
* ``POST /feedback``;
* projects (``GET``/``POST /sessions``), datasets (``GET``/``POST /datasets``) and
  ``POST /examples/bulk``, for uploading a dataset and recording an experiment.

It runs in a thread of its own: the client posts from background threads and, for some
calls, synchronously from the caller's thread (which may be the test's event loop).
Every request body is kept decompressed in :attr:`FakeLangSmith.received`, so a test can
assert that something never left the process.
"""

from __future__ import annotations

import datetime as dt
import email.parser
import email.policy
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import zstandard

TENANT_ID = "00000000-0000-4000-8000-00000000cafe"

INFO = {
    "version": "0.12.0",
    "batch_ingest_config": {
        "use_multipart_endpoint": True,
        "scale_up_qsize_trigger": 1000,
        "scale_up_nthreads_limit": 16,
        "scale_down_nempty_trigger": 4,
        "size_limit": 100,
        "size_limit_bytes": 20_971_520,
    },
    "instance_flags": {"zstd_compression_enabled": True, "dataset_examples_multipart_enabled": False},
}

_RUN_PARTS = ("inputs", "outputs", "events", "extra", "error", "serialized")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    """As sent, after removing any zstd content encoding."""


@dataclass
class FakeLangSmith:
    """The stored state of the fake LangSmith: runs (posts merged with their patches), feedback,
    projects, datasets, examples, and every request as received."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    feedback: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    received: list[Request] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- what tests read -----------------------------------------------------------------

    def all_bytes(self) -> bytes:
        """Every request body received, concatenated (decompressed)."""
        with self._lock:
            return b"\n".join(r.body for r in self.received)

    def ingest_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.received if r.path.startswith(("/runs", "/feedback"))]

    def children(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.runs.values() if r.get("parent_run_id") == run_id]

    def roots(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.runs.values() if not r.get("parent_run_id")]

    def in_trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.runs.values() if r.get("trace_id") == trace_id]

    def tagged(self, tag: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.runs.values() if tag in (r.get("tags") or [])]

    def session_by_name(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return next((s for s in self.sessions.values() if s["name"] == name), None)

    # --- storing -------------------------------------------------------------------------

    def _store_run(self, operation: str, run: dict[str, Any]) -> None:
        run_id = str(run["id"])
        with self._lock:
            stored = self.runs.setdefault(run_id, {})
            # The client sends from background threads, so a run's patch (its end state: outputs,
            # final tags) may arrive before its post; as LangSmith does, the patch wins either way.
            patched: set[str] = stored.setdefault("_patched", set())
            for key, value in run.items():
                if operation == "post" and key not in patched:
                    stored[key] = value
                elif operation != "post" and value is not None:
                    stored[key] = value
                    patched.add(key)
            stored.setdefault("operations", []).append(operation)
            name = run.get("session_name")
            if operation == "post" and name and not any(s["name"] == name for s in self.sessions.values()):
                self._new_session({"name": name})

    def _new_session(self, body: dict[str, Any]) -> dict[str, Any]:
        session = {
            "id": str(uuid.uuid4()),
            "start_time": _now(),
            "tenant_id": TENANT_ID,
            "reference_dataset_id": None,
            "extra": None,
            "description": None,
            **{k: v for k, v in body.items() if k != "id" or v},
        }
        session["id"] = str(session["id"])
        self.sessions[session["id"]] = session
        return session

    def _multipart(self, content_type: str, body: bytes) -> None:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        posts: dict[str, dict[str, Any]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            assert isinstance(name, str), "every part is named"
            assert isinstance(payload, bytes), "every part has a body"
            operation, _, rest = name.partition(".")
            run_id, _, key = rest.partition(".")
            if operation == "feedback":
                with self._lock:
                    self.feedback.append(json.loads(payload))
                continue
            if operation == "attachment":
                continue
            assert operation in ("post", "patch"), f"unknown multipart operation {operation!r}"
            entry = posts.setdefault(f"{operation}.{run_id}", {"id": run_id})
            value = json.loads(payload)
            if key:
                assert key in _RUN_PARTS, f"unknown run part {key!r}"
                entry[key] = value
            else:
                entry.update(value)
        for name, run in posts.items():
            self._store_run(name.partition(".")[0], run)

    # --- HTTP ----------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], raw: bytes
    ) -> tuple[int, Any]:
        body = raw
        if headers.get("content-encoding", "").lower() == "zstd":
            body = zstandard.ZstdDecompressor().stream_reader(raw).read()
        with self._lock:
            self.received.append(Request(method, path, headers, body))
        content_type = headers.get("content-type", "")

        def as_json() -> Any:
            return json.loads(body) if body else None

        if method == "GET" and path == "/info":
            return 200, INFO
        if method == "POST" and path == "/runs/multipart":
            self._multipart(content_type, body)
            return 202, {}
        if method == "POST" and path == "/runs/batch":
            batch = as_json()
            for operation in ("post", "patch"):
                for run in batch.get(operation) or []:
                    self._store_run(operation, run)
            return 202, {}
        if method == "POST" and path == "/runs":
            self._store_run("post", as_json())
            return 202, {}
        if method == "PATCH" and path.startswith("/runs/"):
            self._store_run("patch", {**as_json(), "id": path.rsplit("/", 1)[1]})
            return 202, {}
        if method == "POST" and path == "/feedback":
            with self._lock:
                self.feedback.append(as_json())
            return 200, as_json()
        if path == "/sessions" or path.startswith("/sessions/"):
            return self._sessions(method, path, query, as_json)
        if path == "/datasets" or path.startswith("/datasets/"):
            return self._datasets(method, path, query, as_json)
        if method == "GET" and path == "/examples":
            with self._lock:
                found = [e for e in self.examples if e.get("dataset_id") in query.get("dataset", [])]
            offset = int(query.get("offset", ["0"])[0])
            return 200, found[offset : offset + int(query.get("limit", ["100"])[0])]
        if method == "POST" and path == "/examples/bulk":
            created = []
            for example in as_json():
                stored = {"id": str(example.get("id") or uuid.uuid4()), "created_at": _now(), **example}
                stored["id"] = str(stored["id"])
                created.append(stored)
            with self._lock:
                self.examples.extend(created)
            return 200, created
        return 404, {"detail": f"the fake LangSmith has no {method} {path}"}

    def _sessions(self, method: str, path: str, query: dict[str, list[str]], as_json: Any) -> tuple[int, Any]:
        with self._lock:
            if method == "GET" and path == "/sessions":
                found = list(self.sessions.values())
                if "name" in query:
                    found = [s for s in found if s["name"] == query["name"][0]]
                return 200, found[: int(query.get("limit", ["100"])[0])]
            if method == "GET":
                session = self.sessions.get(path.rsplit("/", 1)[1])
                return (200, session) if session else (404, {"detail": "not found"})
            if method == "POST" and path == "/sessions":
                body = as_json()
                existing = next((s for s in self.sessions.values() if s["name"] == body["name"]), None)
                if existing is not None:
                    if [v.lower() for v in query.get("upsert", [])] != ["true"]:
                        return 409, {"detail": "session exists"}
                    existing.update({k: v for k, v in body.items() if v is not None and k != "id"})
                    return 200, existing
                return 200, self._new_session(body)
            if method == "PATCH":
                session = self.sessions.get(path.rsplit("/", 1)[1])
                if session is None:
                    return 404, {"detail": "not found"}
                # The client sends every field; a null one is "unchanged".
                session.update({k: v for k, v in as_json().items() if v is not None})
                return 200, session
        return 404, {"detail": "not found"}

    def _datasets(self, method: str, path: str, query: dict[str, list[str]], as_json: Any) -> tuple[int, Any]:
        with self._lock:
            if method == "GET" and path == "/datasets":
                found = list(self.datasets.values())
                if "name" in query:
                    found = [d for d in found if d["name"] == query["name"][0]]
                return 200, found[: int(query.get("limit", ["100"])[0])]
            if method == "GET":
                dataset = self.datasets.get(path.rsplit("/", 1)[1])
                return (200, dataset) if dataset else (404, {"detail": "not found"})
            if method == "POST" and path == "/datasets":
                body = as_json()
                if any(d["name"] == body["name"] for d in self.datasets.values()):
                    return 409, {"detail": "dataset exists"}
                dataset = {"id": str(uuid.uuid4()), "created_at": _now(), "tenant_id": TENANT_ID, **body}
                dataset["id"] = str(dataset["id"])
                self.datasets[dataset["id"]] = dataset
                return 200, dataset
        return 404, {"detail": "not found"}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLangSmith

    def _serve(self) -> None:
        parsed = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, payload = self.fake.handle(self.command, parsed.path, parse_qs(parsed.query), headers, raw)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def running_fake_langsmith() -> Iterator[FakeLangSmith]:
    """A fake LangSmith on a free loopback port, stopped when the block ends."""
    fake = FakeLangSmith()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="fake-langsmith", daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
