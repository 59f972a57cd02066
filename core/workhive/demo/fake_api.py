"""A local fake LLM API for the demo: a real HTTP server on 127.0.0.1 that rate-limits per key.

``POST /v1/summarize`` with ``Authorization: Bearer <key>`` and ``{"text": "…"}``
answers ``{"summary": "…", "words": n}`` after a short simulated latency.
Each key may make ``rate`` calls per ``window`` seconds (requests per
minute with ``window=60``), refilled continuously: a token bucket holding
``rate`` calls, as OpenAI and Anthropic describe their limits. Beyond that it
answers 429 with ``Retry-After`` (whole seconds until a call is allowed
again, as most APIs send it) and an OpenAI-style error body. Revoked
keys and unknown keys answer 401. ``GET /v1/stats`` returns per-key request
counts (by key *label*, never the key itself), with the most calls a key
had in flight at once (``max_in_flight``: a bench checks a concurrency
limit with it). ``set_rate`` changes the limit while it runs (a provider
that halves a key's limit, then doubles it).

>>> with FakeLLMApi({"sk-a": "key-1"}, revoked={"sk-b": "key-3"}) as api:  # doctest: +SKIP
...     print(api.url)  # http://127.0.0.1:54321
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import attrs

__all__ = ["FakeLLMApi", "KeyStats", "summarise_text"]


@attrs.define
class KeyStats:
    """What the server saw from one key."""

    requests: int = 0
    ok: int = 0
    rate_limited: int = 0
    unauthorized: int = 0
    in_flight: int = 0  # admitted calls not answered yet
    max_in_flight: int = 0


def summarise_text(text: str, max_words: int = 12) -> str:
    """The fake model's "summary": the first sentence, cut to ``max_words`` words.

    >>> summarise_text("Bees build hives. They make honey.")
    'Bees build hives.'
    """
    first = text.strip().split(". ")[0].rstrip(".")
    words = first.split()
    return " ".join(words[:max_words]) + ("…" if len(words) > max_words else ".")


class _Bucket:
    """One key's allowance: ``level`` calls left, refilled at ``rate / window`` per second up to ``rate``."""

    __slots__ = ("level", "updated")

    def __init__(self, rate: float) -> None:
        self.level = float(rate)
        self.updated = time.monotonic()


class FakeLLMApi:
    """The server: start with ``start()`` (or ``with``), stop with ``stop()``.

    ``keys`` maps each accepted key to a label; ``revoked`` maps keys that
    always answer 401 to their labels. ``latency`` is seconds per successful
    call (the "model" thinking).
    """

    def __init__(
        self,
        keys: Mapping[str, str],
        *,
        revoked: Mapping[str, str] | None = None,
        rate: int = 15,
        window: float = 1.0,
        latency: float = 0.02,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.keys = dict(keys)
        self.revoked = dict(revoked or {})
        self.rate: float = rate
        self.window = window
        self.latency = latency
        self.stats: dict[str, KeyStats] = {label: KeyStats() for label in (*self.keys.values(), *self.revoked.values())}
        self._buckets: dict[str, _Bucket] = {label: _Bucket(rate) for label in self.keys.values()}
        self._lock = threading.Lock()
        #: ``time.monotonic()`` of the first request any key made; None before it
        self.first_request_at: float | None = None
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321`` (the port is picked free by the OS)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeLLMApi:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-llm-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMApi:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def set_rate(self, rate: float) -> None:
        """Allow ``rate`` calls per ``window`` from now on, every key (the buckets keep their level, capped).

        >>> api.set_rate(api.rate / 2)  # doctest: +SKIP
        """
        with self._lock:
            now = time.monotonic()
            for bucket in self._buckets.values():  # refill at the old rate up to now, then the new one applies
                bucket.level = min(float(self.rate), bucket.level + (now - bucket.updated) * self.rate / self.window)
                bucket.level = min(bucket.level, float(rate))
                bucket.updated = now
            self.rate = rate

    def stats_json(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {label: attrs.asdict(s) for label, s in sorted(self.stats.items())}

    # -- the decision for one request ---------------------------------------
    def _admit(self, key: str) -> tuple[int, dict[str, str], dict[str, Any]]:
        """Status, extra headers and error body for ``key`` right now (200 with an empty body: go ahead)."""
        with self._lock:
            if self.first_request_at is None:
                self.first_request_at = time.monotonic()
            if key in self.revoked:
                self.stats[self.revoked[key]].requests += 1
                self.stats[self.revoked[key]].unauthorized += 1
                return 401, {}, _error("authentication_error", "this API key has been revoked")
            label = self.keys.get(key)
            if label is None:
                return 401, {}, _error("authentication_error", "unknown API key")
            stats = self.stats[label]
            stats.requests += 1
            bucket = self._buckets[label]
            now = time.monotonic()
            per_second = self.rate / self.window
            bucket.level = min(float(self.rate), bucket.level + (now - bucket.updated) * per_second)
            bucket.updated = now
            if bucket.level < 1.0:
                stats.rate_limited += 1
                wait = (1.0 - bucket.level) / per_second
                headers = {"Retry-After": str(max(1, math.ceil(wait)))}
                message = f"rate limit: {self.rate} requests per {self.window:g}s"
                return 429, headers, _error("rate_limit_error", message)
            bucket.level -= 1.0
            stats.ok += 1
            stats.in_flight += 1
            stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
            return 200, {}, {}

    def _answered(self, key: str) -> None:
        with self._lock:
            self.stats[self.keys[key]].in_flight -= 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections as with a real API

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the demo prints its own report
                return

            def _send(self, status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
                # A call counts as in flight until its answer leaves, not until it has left: the client
                # may read it, hand its key's slot on, and the next call arrive and be admitted on
                # another thread before this one is done writing (max_in_flight read 3 at a limit of 2).
                self._uncount()
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                if self.path == "/v1/stats":
                    self._send(200, api.stats_json())
                else:
                    self._send(404, _error("not_found", f"no route {self.path}"))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path != "/v1/summarize":
                    self._send(404, _error("not_found", f"no route {self.path}"))
                    return
                auth = self.headers.get("Authorization", "")
                key = auth[7:].strip() if auth.startswith("Bearer ") else ""
                status, headers, error = api._admit(key)
                if status != 200:
                    self._send(status, error, headers)
                    return
                self._counted: str | None = key
                try:
                    self._answer(raw)
                finally:
                    self._uncount()  # (if no answer was sent)

            def _uncount(self) -> None:
                key, self._counted = getattr(self, "_counted", None), None
                if key is not None:
                    api._answered(key)

            def _answer(self, raw: bytes) -> None:
                try:
                    text = json.loads(raw)["text"]
                    if not isinstance(text, str):
                        raise TypeError("text must be a string")
                except (ValueError, KeyError, TypeError) as exc:
                    self._send(400, _error("invalid_request_error", f"body must be {{'text': str}}: {exc}"))
                    return
                time.sleep(api.latency)
                self._send(200, {"summary": summarise_text(text), "words": len(text.split())})

        return Handler


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}
