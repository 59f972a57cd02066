"""The Redis the tests use, and the key prefixes they own.

Tests run against ``WORKHIVE_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``),
each under a key prefix of its own, deleted afterwards (tox runs envs in
parallel against the same server). Without a server they are skipped with
the reason, except under ``WORKHIVE_REQUIRE_SERVICES=1``, where they fail.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

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


@pytest.fixture(autouse=True)
def _own_prefixes() -> Iterator[None]:
    require_redis()
    yield
    created, _created[:] = list(_created), []
    if created:
        delete_prefixes(created)
