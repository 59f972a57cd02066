"""The Redis servers the tests use: the shared one with a key prefix per test, and private ones to restart.

Tests run against ``WORKHIVE_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``),
each under a key prefix of its own, deleted afterwards (tox runs envs in
parallel against the same server). Without a server they are skipped with
the reason, except under ``WORKHIVE_REQUIRE_SERVICES=1``, where they fail.
Tests that kill and restart a server start a private ``redis-server`` on a
free port (``PrivateRedis``), never the shared one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from workhive.testing.processes import free_port

REDIS_URL = os.environ.get("WORKHIVE_REDIS_URL", "redis://127.0.0.1:6379/0")
_created: list[str] = []


def _reachable() -> str | None:
    """None when the server answers PING, else why not."""
    parts = urlsplit(REDIS_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError as exc:
        return f"no Redis server at {parts.hostname}:{parts.port or 6379} ({exc})"
    if not reply.startswith(b"+PONG"):
        return f"the server at {parts.hostname}:{parts.port or 6379} did not answer PING with PONG ({reply[:40]!r})"
    return None


_WHY_NOT = _reachable()


def require_redis() -> None:
    if _WHY_NOT is None:
        return
    if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"WORKHIVE_REQUIRE_SERVICES=1 but {_WHY_NOT}")
    pytest.skip(f"{_WHY_NOT}; start redis-server or set WORKHIVE_REDIS_URL")


def new_prefix() -> str:
    """A key prefix no other test uses; its keys are deleted after the test."""
    prefix = f"wht-{uuid.uuid4().hex[:16]}"
    _created.append(prefix)
    return prefix


def url_for(prefix: str, base: str = REDIS_URL, **options: object) -> str:
    query = "&".join([f"prefix={prefix}", *(f"{k}={v}" for k, v in options.items())])
    return f"{base}{'&' if '?' in base else '?'}{query}"


def delete_prefixes(prefixes: list[str], base: str = REDIS_URL) -> None:
    import redis

    client = redis.Redis.from_url(base.split("?")[0])
    try:
        for prefix in prefixes:
            for pattern in (f"{{{prefix}}}*", f"{{{prefix}/*"):
                keys = list(client.scan_iter(match=pattern, count=1000))
                for start in range(0, len(keys), 500):
                    client.delete(*keys[start : start + 500])
    finally:
        client.close()


class PrivateRedis:
    """``redis-server`` with an append-only file fsynced on every write, in ``directory``."""

    def __init__(self, directory: Path, *extra: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (the restart tests start a private one)")
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.extra = extra

    def start(self) -> None:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"), *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.directory / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING within 60 s")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save; what the append-only file holds is what survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        self.kill()


# -- what the open, schema and failure tests share -----------------------------------
SECRET = "s3cret-Pa55word"


def keys_of(prefix: str, base: str = REDIS_URL) -> list[str]:
    """Every key under ``prefix`` on the server, sorted."""
    import redis as redis_py

    client = redis_py.Redis.from_url(base.split("?")[0], decode_responses=True)
    try:
        return sorted(k for pattern in (f"{{{prefix}}}*", f"{{{prefix}/*") for k in client.scan_iter(match=pattern))
    finally:
        client.close()
