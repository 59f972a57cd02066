"""Where one scenario's fleet keeps its items: a SQLite file, or a private server behind the fault proxy.

A ``Target`` holds two URLs: ``fleet_url`` is what ``workhive work`` gets (for
the server engines it points at the ``FaultProxy``, so the nemesis can cut,
stall and half-open the fleet's connections), ``direct_url`` is what the
watcher and the checker read through (straight to the server, and short retry
windows so that a reading during an outage fails fast instead of hanging).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import attrs

from .proxy import FaultProxy
from .servers import PrivatePostgres, PrivateRedis

__all__ = ["ENGINES", "RETRY_FOR", "Target", "make_target"]

ENGINES = ("sqlite", "postgres", "redis")
#: seconds the fleet's storage retries a lost connection (its ``retry_for``): part of the
#: "lease + retry window" every claim must settle within
RETRY_FOR = {"sqlite": 0.0, "postgres": 5.0, "redis": 5.0}


@attrs.define
class Target:
    """One scenario's store; see the module docstring."""

    engine: str
    fleet_url: str
    direct_url: str
    workdir: Path
    server: PrivatePostgres | PrivateRedis | None = None
    proxy: FaultProxy | None = None
    namespace: str = ""

    @property
    def retry_for(self) -> float:
        return RETRY_FOR[self.engine]

    def stored_files(self) -> list[Path]:
        """Files the store persisted, grepped for the canary (SQLite's database and WAL, Redis's AOF)."""
        if self.engine == "sqlite":
            return sorted(self.workdir.glob("hive.db*"))
        if isinstance(self.server, PrivateRedis):
            return self.server.stored_files()
        return []  # PostgreSQL's rows are read back through SQL instead (see checker.stored_text)

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if isinstance(self.server, PrivatePostgres):
            asyncio.run(_drop_schema(self.server, self.namespace))
        elif isinstance(self.server, PrivateRedis):
            _drop_prefix(self.server, self.namespace)


def make_target(engine: str, workdir: Path, server: PrivatePostgres | PrivateRedis | None) -> Target:
    """A fresh store for one scenario (its own SQLite file, PostgreSQL schema or Redis prefix)."""
    name = f"whfaults_{uuid.uuid4().hex[:10]}"
    if engine == "sqlite":
        url = f"sqlite:///{workdir / 'hive.db'}"
        return Target(engine, url, url, workdir, namespace=name)
    assert server is not None
    proxy = FaultProxy(server.address)
    proxy.start()
    retry = RETRY_FOR[engine]
    if isinstance(server, PrivatePostgres):
        options = f"?schema={name}&connect_timeout=3&command_timeout=3"
        fleet = f"{server.dsn(proxy.port)}{options}&retry_for={retry:g}"
        direct = f"{server.dsn()}{options}&retry_for=1&pool_size=2"
    else:
        options = f"?prefix={name}:&timeout=3"
        fleet = f"redis://127.0.0.1:{proxy.port}/0{options}&retry_for={retry:g}"
        direct = f"redis://127.0.0.1:{server.port}/0{options}&retry_for=1"
    return Target(engine, fleet, direct, workdir, server=server, proxy=proxy, namespace=name)


async def _drop_schema(server: PrivatePostgres, schema: str) -> None:
    import asyncpg  # installed with workhive-postgres

    if server.process is None:
        return
    conn = await asyncpg.connect(server.dsn(), timeout=10)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def _drop_prefix(server: PrivateRedis, prefix: str) -> None:
    import redis  # installed with workhive-redis

    if server.process is None:
        return
    client = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        for pattern in (f"{prefix}*", f"*{prefix}*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()
