"""A hive of its own on each workhive engine, for the tests that run on all four.

memory and SQLite always run. PostgreSQL (``WORKHIVE_POSTGRES_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``) and Redis (``WORKHIVE_REDIS_URL``,
default ``redis://127.0.0.1:6379/0``) run when the server answers, each test
in a schema or key prefix of its own that is dropped afterwards; otherwise
they skip with the reason, or fail under ``WORKHIVE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ENGINES = ("memory", "sqlite", "postgres", "redis")
POSTGRES = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("WORKHIVE_REDIS_URL", "redis://127.0.0.1:6379/0")


def _answers(url: str, default_port: int) -> str | None:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=2).close()
    except OSError as exc:
        return f"no server at {parts.hostname}:{parts.port or default_port} ({exc})"
    return None


def require(engine: str) -> None:
    """Skip (or fail under WORKHIVE_REQUIRE_SERVICES=1) when the engine's server does not answer."""
    problem = {"postgres": lambda: _answers(POSTGRES, 5432), "redis": lambda: _answers(REDIS, 6379)}.get(
        engine, lambda: None
    )()
    if problem is None:
        return
    if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"WORKHIVE_REQUIRE_SERVICES=1 but {problem}", pytrace=False)
    pytest.skip(f"{engine}: {problem}")


class Place:
    """Where one test's hive lives on one engine: its URL, the options to open it with, and its clean-up."""

    def __init__(self, engine: str, tmp_path: Path) -> None:
        self.engine = engine
        self.tag = uuid.uuid4().hex[:16]
        if engine == "memory":
            # Named memory locks: every handle on this hive in the process meets the same locks.
            self.url = f"memory://fm-{self.tag}"
            self.options = {"locks": self.url}
        elif engine == "sqlite":
            self.url = f"sqlite:///{tmp_path / f'hive-{self.tag}.db'}"
            self.options = {"locks": f"fcntl:///{tmp_path / f'locks-{self.tag}'}"}
        elif engine == "postgres":
            self.url = f"{POSTGRES}?schema=whfm_{self.tag}"
            self.options = {"locks": self.url}
        elif engine == "redis":
            self.url = f"{REDIS}?prefix=whfm-{self.tag}"
            self.options = {"locks": self.url}
        else:
            raise ValueError(f"unknown engine {engine!r}")

    def env(self) -> dict[str, str]:
        """Environment variables that select this hive (workhive's own settings)."""
        env = {"WORKHIVE_STORAGE": self.url}
        if "locks" in self.options:
            env["WORKHIVE_LOCKS"] = str(self.options["locks"])
        return env

    def clean(self) -> None:
        if self.engine == "postgres":
            asyncio.run(_drop_schema(f"whfm_{self.tag}"))
        elif self.engine == "redis":
            _delete_prefix(f"whfm-{self.tag}")


async def _drop_schema(name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES, timeout=10)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


def _delete_prefix(prefix: str) -> None:
    import redis

    client: Any = redis.Redis.from_url(REDIS)
    try:
        for pattern in (f"{{{prefix}}}*", f"{{{prefix}/*", f"{prefix}*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            for start in range(0, len(keys), 500):
                client.delete(*keys[start : start + 500])
    finally:
        client.close()
