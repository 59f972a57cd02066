"""With the core and workhive-postgres alone, a hive's default locks are PostgreSQL's, in the hive's schema.

Issue 26: `workhive work` on PostgreSQL failed at start asking for
workhive-fcntl-locks, though the engine ships fleet-wide locks. Every other
installed workhive plugin is blocked with ``WORKHIVE_DISABLE_PLUGINS`` here,
which is what an install of ``workhive`` + ``workhive-postgres`` sees.
"""

from __future__ import annotations

import asyncio
import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import postgres_server
import pytest

import workhive
import workhive_postgres.plugin
from workhive.plugin_manager import ENTRY_POINT_GROUP, PluginManager
from workhive.testing.certificates import make_ca, make_certificate, openssl_missing
from workhive_postgres import PostgresLocks
from workhive_postgres import url as pg_url

PASSWORD = "pg-default-locks-secret"  # the server trusts every login; the password must still never show

HANDLER = """
async def locked(ctx):
    async with ctx.lock("fleet-wide", ttl=60) as held:
        return {"lock_token": held.token}
"""


def only_postgres_env(workdir: Path) -> dict[str, str]:
    """The environment of an install with no workhive plugin but workhive-postgres."""
    others = sorted({ep.name for ep in md.entry_points(group=ENTRY_POINT_GROUP)} - {"postgres"})
    env = {k: v for k, v in os.environ.items() if k not in ("WORKHIVE_LOCKS", "WORKHIVE_CONFIG")}
    env["WORKHIVE_DISABLE_PLUGINS"] = ",".join(others)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(workdir), env.get("PYTHONPATH", "")]))
    return env


def cli(workdir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workhive", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=workdir,
        env=only_postgres_env(workdir),
        timeout=300,
    )


def with_password(url: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)


def test_the_locks_take_every_option_of_the_storage_url_and_its_schema(schema: str, tmp_path: Path) -> None:
    if openssl_missing():
        pytest.skip(openssl_missing())
    ca = make_ca(tmp_path, "locks")
    client = make_certificate(tmp_path, ca, "client")
    passfile = tmp_path / "pgpass"
    passfile.write_text("*:*:*:*:unused\n")
    passfile.chmod(0o600)
    options = {
        "schema": schema,
        "pool_size": "3",
        "connect_timeout": "7",
        "command_timeout": "11",
        "retry_for": "9",
        "sslmode": "verify-ca",
        "application_name": "wh_default_locks",
        "passfile": str(passfile),
        "sslrootcert": str(ca.cert),
        "sslcert": str(client.cert),
        "sslkey": str(client.key),
        "sslpassword": "unused-for-an-unencrypted-key",
        "pgbouncer": "session",
        "direct_host": "127.0.0.1",
        "direct_port": "5432",
    }
    # A new storage URL option must be added here, so this test keeps covering all of them.
    assert set(options) == set(pg_url._OPTIONS)
    url = with_password(postgres_server.SERVER) + "?" + "&".join(f"{k}={v}" for k, v in options.items())
    manager = PluginManager(entry_points=False, extra=[("postgres", workhive_postgres.plugin)])
    hive = workhive.open(url, manager=manager)
    locks = hive.locks()
    assert isinstance(locks, PostgresLocks)
    assert locks.config == hive.storage.config  # type: ignore[attr-defined]  # server, schema, every option
    assert PASSWORD not in repr(locks) and PASSWORD not in locks.url


def test_workhive_work_with_only_postgres_installed_takes_its_locks_in_the_hive_schema(
    schema: str, tmp_path: Path
) -> None:
    url = with_password(postgres_server.url_for(schema))
    (tmp_path / "pg_default_locks_handler.py").write_text(HANDLER)
    pushed = cli(tmp_path, "--storage", url, "push", "jobs", "-", stdin="".join(f'{{"n": {i}}}\n' for i in range(6)))
    assert pushed.returncode == 0, pushed.stderr

    config = cli(tmp_path, "--storage", url, "config", "--json")
    assert config.returncode == 0, config.stderr
    shown = json.loads(config.stdout)["settings"]["locks"]
    assert shown == {"value": url.replace(PASSWORD, "***"), "source": "default"}

    work = cli(
        tmp_path, "--storage", url, "work", "jobs", "--handler", "pg_default_locks_handler:locked",
        "--processes", "1", "--concurrency", "2", "--until-empty", "--progress", "none", "--json",
    )  # fmt: skip
    assert work.returncode == 0, work.stderr[-3000:]
    for text in (pushed.stdout, pushed.stderr, config.stdout, config.stderr, work.stdout, work.stderr):
        assert PASSWORD not in text

    async def after() -> tuple[list[int], int]:
        async with workhive.open(url) as hive:
            done = await hive.pool("jobs").items("done", limit=100)
        locks = PostgresLocks(url)
        try:
            held = await locks.acquire("fleet-wide", ttl=None, timeout=30, worker_id="test")
            await locks.release(held)
        finally:
            await locks.close()
        return sorted(item.result["lock_token"] for item in done), held.token

    tokens, next_token = asyncio.run(after())
    assert len(set(tokens)) == 6  # every item held the lock once, each with a fencing token of its own
    assert next_token > max(tokens)  # the tokens rose in one sequence: PostgreSQL's, in this schema
    assert not (tmp_path / ".workhive").exists()  # no fcntl lock directory was made


def test_workhive_locks_lists_the_postgres_locks_of_the_hive(schema: str, tmp_path: Path) -> None:
    url = postgres_server.url_for(schema)

    async def hold_and_list() -> subprocess.CompletedProcess[str]:
        locks = PostgresLocks(url)
        try:
            held = await locks.acquire("deploy:acme", ttl=None, timeout=30, worker_id="w-test")
            listed = await asyncio.to_thread(cli, tmp_path, "--storage", url, "locks", "list", "--json")
            await locks.release(held)
            return listed
        finally:
            await locks.close()

    listed = asyncio.run(hold_and_list())
    assert listed.returncode == 0, listed.stderr
    assert [(h["name"], h["worker_id"]) for h in json.loads(listed.stdout)] == [("deploy:acme", "w-test")]
