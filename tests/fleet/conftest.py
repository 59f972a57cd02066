"""The fleet end to end for one storage × locks pair, chosen by the tox factor.

``WORKHIVE_FLEET`` names the pair as ``fleet-<storage>-<locks>`` (storage:
sqlite, postgres, redis; locks: fcntl, postgres, redis); tox sets it to the env
name (``fleet-postgres-redis``). Each test gets a store and a lock namespace of its
own (a temporary directory, a PostgreSQL schema, a Redis key prefix) and drops
it afterwards, so parallel tox envs never meet. A server that is not running
skips the test with the reason, except under ``WORKHIVE_REQUIRE_SERVICES=1``
(CI), where it fails.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

HERE = Path(__file__).parent
# tox hands over its env name, fleet-<storage>-<locks>; a bare pytest run takes the default pair.
_, STORAGE, LOCKS = os.environ.get("WORKHIVE_FLEET", "fleet-sqlite-fcntl").split("-")
PG = ("127.0.0.1", 5432)
REDIS = ("127.0.0.1", 6379)


def _service(name: str, address: tuple[str, int]) -> None:
    """Skip (or fail under WORKHIVE_REQUIRE_SERVICES=1) when the server at ``address`` does not answer."""
    try:
        socket.create_connection(address, timeout=3).close()
    except OSError as exc:
        reason = f"{name} is not reachable at {address[0]}:{address[1]} ({exc})"
        if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason}; WORKHIVE_REQUIRE_SERVICES=1 requires it")
        pytest.skip(reason)


def _drop_schema(schema: str) -> None:
    import asyncpg  # installed with workhive-postgres

    async def drop() -> None:
        conn = await asyncpg.connect(host=PG[0], port=PG[1], user="postgres", database="test")
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


def _drop_prefix(prefix: str) -> None:
    import redis  # installed with workhive-redis

    client = redis.Redis(host=REDIS[0], port=REDIS[1])
    try:
        for pattern in (f"{prefix}*", f"*{prefix}*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@attrs.frozen
class Target:
    """Where one test's fleet keeps its items and takes its locks."""

    storage: str
    locks: str
    workdir: Path

    def cli(self, *args: str, input: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``workhive --storage URL ARGS`` in a fresh interpreter, the way a user would."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
        env["WORKHIVE_LOCKS"] = self.locks
        return subprocess.run(
            [sys.executable, "-m", "workhive", "--storage", self.storage, *args],
            input=input,
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env=env,
            timeout=timeout,
        )


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    name = f"whfleet_{uuid.uuid4().hex[:12]}"
    cleanups: list[Callable[[], None]] = []
    urls: dict[str, str] = {}
    for role, kind in (("storage", STORAGE), ("locks", LOCKS)):
        if kind == "sqlite" and role == "storage":
            urls[role] = f"sqlite:///{tmp_path / 'hive.db'}"
        elif kind == "fcntl" and role == "locks":
            urls[role] = f"fcntl:///{tmp_path / 'locks'}"
        elif kind == "postgres":
            _service("PostgreSQL", PG)
            urls[role] = f"postgresql://postgres@{PG[0]}:{PG[1]}/test?schema={name}_{role}"
            cleanups.append(lambda s=f"{name}_{role}": _drop_schema(s))
        elif kind == "redis":
            _service("Redis", REDIS)
            urls[role] = f"redis://{REDIS[0]}:{REDIS[1]}/0?prefix={name}_{role}:"
            cleanups.append(lambda p=f"{name}_{role}:": _drop_prefix(p))
        else:
            raise pytest.UsageError(f"unknown fleet {role} {kind!r}; see tests/fleet/conftest.py")
    try:
        yield Target(urls["storage"], urls["locks"], tmp_path)
    finally:
        for cleanup in cleanups:
            cleanup()
