"""With the core and workhive-redis alone, a hive's default locks are Redis's, under the hive's prefix.

Issue 26: `workhive work` on Redis (the README's own example) failed at start
asking for workhive-fcntl-locks, though the engine ships fleet-wide locks.
Every other installed workhive plugin is blocked with ``WORKHIVE_DISABLE_PLUGINS``
here, which is what an install of ``workhive`` + ``workhive-redis`` sees.
"""

from __future__ import annotations

import asyncio
import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import workhive_redis.plugin
from redis_server import new_prefix, url_for
from workhive_redis import url as redis_url
from workhive_redis.locks import RedisLocks

import workhive
from workhive.plugin_manager import ENTRY_POINT_GROUP, PluginManager

HANDLER = """
async def locked(ctx):
    async with ctx.lock("fleet-wide", ttl=60) as held:
        return {"lock_token": held.token}
"""


def only_redis_env(workdir: Path) -> dict[str, str]:
    """The environment of an install with no workhive plugin but workhive-redis."""
    others = sorted({ep.name for ep in md.entry_points(group=ENTRY_POINT_GROUP)} - {"redis"})
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
        env=only_redis_env(workdir),
        timeout=300,
    )


def test_the_locks_take_every_option_of_the_storage_url_and_its_prefix(tmp_path: Path) -> None:
    for name in ("ca.pem", "client.crt", "client.key"):  # read when the URL is parsed: they must exist
        (tmp_path / name).write_text("not read until a connection is made\n")
    (tmp_path / "password").write_text("hunter2\n")
    options = {
        "prefix": "wh-default-locks",
        "retry_for": "9",
        "timeout": "7",
        "lease": "3",
        "db": "2",
        "password_file": str(tmp_path / "password"),
        "ssl_cert_reqs": "required",
        "ssl_ca_certs": str(tmp_path / "ca.pem"),
        "ssl_certfile": str(tmp_path / "client.crt"),
        "ssl_keyfile": str(tmp_path / "client.key"),
    }
    # A new storage URL option must be added here, so this test keeps covering all of them.
    assert set(options) == set(redis_url._OPTIONS) | set(redis_url._TLS_OPTIONS)
    url = "rediss://cache.example:6380?" + "&".join(f"{k}={v}" for k, v in options.items())
    manager = PluginManager(entry_points=False, extra=[("redis", workhive_redis.plugin)])
    hive = workhive.open(url, manager=manager)
    locks = hive.locks()  # built, not connected: nothing reaches cache.example
    assert isinstance(locks, RedisLocks)
    assert locks.config == hive.storage.config  # type: ignore[attr-defined]  # server, prefix, every option
    assert locks.keys.locks == hive.storage.keys.locks  # type: ignore[attr-defined]
    assert "hunter2" not in repr(locks)


def test_workhive_work_with_only_redis_installed_takes_its_locks_under_the_hive_prefix(tmp_path: Path) -> None:
    url = url_for(new_prefix())
    (tmp_path / "redis_default_locks_handler.py").write_text(HANDLER)
    pushed = cli(tmp_path, "--storage", url, "push", "jobs", "-", stdin="".join(f'{{"n": {i}}}\n' for i in range(6)))
    assert pushed.returncode == 0, pushed.stderr

    config = cli(tmp_path, "--storage", url, "config", "--json")
    assert config.returncode == 0, config.stderr
    assert json.loads(config.stdout)["settings"]["locks"] == {"value": url, "source": "default"}

    work = cli(
        tmp_path, "--storage", url, "work", "jobs", "--handler", "redis_default_locks_handler:locked",
        "--processes", "1", "--concurrency", "2", "--until-empty", "--progress", "none", "--json",
    )  # fmt: skip
    assert work.returncode == 0, work.stderr[-3000:]

    async def after() -> tuple[list[int], int]:
        async with workhive.open(url) as hive:
            done = await hive.pool("jobs").items("done", limit=100)
        locks = RedisLocks(url)
        try:
            held = await locks.acquire("fleet-wide", ttl=None, timeout=30, worker_id="test")
            await locks.release(held)
        finally:
            await locks.close()
        return sorted(item.result["lock_token"] for item in done), held.token

    tokens, next_token = asyncio.run(after())
    assert len(set(tokens)) == 6  # every item held the lock once, each with a fencing token of its own
    assert next_token > max(tokens)  # the tokens rose in one sequence: Redis's, under this prefix
    assert not (tmp_path / ".workhive").exists()  # no fcntl lock directory was made


def test_workhive_locks_lists_the_redis_locks_of_the_hive(tmp_path: Path) -> None:
    url = url_for(new_prefix())

    async def hold_and_list() -> subprocess.CompletedProcess[str]:
        locks = RedisLocks(url)
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
