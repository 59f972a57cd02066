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

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from workhive.testing.services import POSTGRES, REDIS, require_service
from workhive.testing.services import drop_postgres_schema as _drop_schema
from workhive.testing.services import drop_redis_prefix as _drop_prefix

HERE = Path(__file__).parent
# tox hands over its env name, fleet-<storage>-<locks>; a bare pytest run takes the default pair.
_, STORAGE, LOCKS = os.environ.get("WORKHIVE_FLEET", "fleet-sqlite-fcntl").split("-")
PG = POSTGRES


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
            require_service("PostgreSQL", PG)
            urls[role] = f"postgresql://postgres@{PG[0]}:{PG[1]}/test?schema={name}_{role}"
            cleanups.append(lambda s=f"{name}_{role}": _drop_schema(s))
        elif kind == "redis":
            require_service("Redis", REDIS)
            urls[role] = f"redis://{REDIS[0]}:{REDIS[1]}/0?prefix={name}_{role}:"
            cleanups.append(lambda p=f"{name}_{role}:": _drop_prefix(p))
        else:
            raise pytest.UsageError(f"unknown fleet {role} {kind!r}; see tests/fleet/conftest.py")
    try:
        yield Target(urls["storage"], urls["locks"], tmp_path)
    finally:
        for cleanup in cleanups:
            cleanup()
