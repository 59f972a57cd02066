"""``failures.py``: unreachable servers, refused logins and commands, values too large; never the password."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis as redis_py
from redis_server import REDIS_URL, SECRET, PrivateRedis, new_prefix, url_for

import workhive
from workhive.errors import InvalidItem, StorageUnavailable


def test_an_unreachable_server_is_named_and_the_password_is_not() -> None:
    async def main() -> None:
        with pytest.raises(StorageUnavailable, match=r"127\.0\.0\.1:1\b") as info:
            async with workhive.open(f"redis://:{SECRET}@127.0.0.1:1/0?retry_for=0.3"):
                pass
        assert SECRET not in str(info.value)

    asyncio.run(main())


def test_a_database_out_of_range_is_a_clear_error() -> None:
    async def main() -> None:
        with pytest.raises(StorageUnavailable, match="no database 99999"):
            async with workhive.open(url_for(new_prefix(), base=REDIS_URL.rsplit("/", 1)[0] + "/99999")):
                pass

    asyncio.run(main())


def test_an_oversized_value_is_refused_before_anything_is_stored() -> None:
    async def main() -> None:
        async with workhive.open(url_for(new_prefix())) as hive:
            pool = hive.pool("jobs")
            await pool.push("small")
            with pytest.raises(InvalidItem, match="at most"):
                await pool.push("x" * (17 * 1024 * 1024))
            item = await pool.claim("w1")
            assert item is not None
            with pytest.raises(InvalidItem):
                await pool.complete(item, "y" * (17 * 1024 * 1024))
            stats = await pool.stats()
            assert (stats.pending, stats.claimed, stats.done) == (0, 1, 0)

    asyncio.run(main())


def test_private_server_wrong_password_acl_without_scripting_and_script_flush(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path, "--requirepass", SECRET)
    server.start()
    base = f"redis://:{SECRET}@127.0.0.1:{server.port}/0"
    try:
        admin = redis_py.Redis.from_url(base, decode_responses=True)
        admin.acl_setuser("noscript", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                          commands=["+@all", "-@scripting"])  # fmt: skip
        admin.close()

        async def main() -> None:
            with pytest.raises(StorageUnavailable, match="refused the login") as info:
                async with workhive.open(f"redis://:wrong-{SECRET}@127.0.0.1:{server.port}/0?retry_for=0.3"):
                    pass
            assert SECRET not in str(info.value)
            with pytest.raises(StorageUnavailable, match=r"ACL rules: .*\+evalsha \+script\|load"):
                async with workhive.open(f"redis://noscript:pw@127.0.0.1:{server.port}/0?retry_for=0.3"):
                    pass
            async with workhive.open(f"{base}?prefix=flush") as hive:
                assert await hive.storage.notices() == []  # type: ignore[attr-defined]
                pool = hive.pool("jobs")
                await pool.push_many(["a", "b"])
                first = await pool.claim("w1")
                client = redis_py.Redis.from_url(base)
                client.script_flush()  # the scripts are gone, as after a restart
                client.close()
                assert first is not None
                second = await pool.complete_and_claim(first, "ok", "w1")
                assert second is not None and second.data == "b"

        asyncio.run(main())
    finally:
        server.stop()


def test_work_on_a_server_that_cannot_be_reached_is_a_failed_run_not_a_bad_command(tmp_path: Path) -> None:
    """Exit 1 (the run failed: retry later), not 2 (fix the command), and the password is not shown."""
    url = f"redis://:{SECRET}@127.0.0.1:1/0?retry_for=0.3"
    command = ["work", "jobs", "--handler", "json:dumps", "--until-empty"]
    done = subprocess.run(
        [sys.executable, "-m", "workhive", "--storage", url, *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "error: " in done.stderr and "127.0.0.1:1" in done.stderr, done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_work_started_while_the_server_is_down_waits_for_it_within_retry_for(tmp_path: Path) -> None:
    """A fleet (re)started during a server restart or a network blip waits for its store, within
    ``retry_for``, instead of exiting at once; then drains as usual."""
    server = PrivateRedis(tmp_path)
    server.start()
    url = f"{server.url}?prefix=waits:&retry_for=300"
    try:
        pushed = subprocess.run(
            [sys.executable, "-m", "workhive", "--storage", url, "push", "jobs", "-"],
            input="".join(f'{{"n": {n}}}\n' for n in range(5)),
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stderr
        server.kill()  # the append-only file keeps the items
        command = ["work", "jobs", "--handler", "builtins:id", "--until-empty", "--processes", "1", "--json"]
        fleet = subprocess.Popen(
            [sys.executable, "-m", "workhive", "--storage", url, *command],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )  # fmt: skip
        try:
            assert fleet.stderr is not None
            seen = []
            for line in fleet.stderr:  # the fleet says it waits; only then does the server come back
                seen.append(line)
                if "not reachable yet" in line:
                    break
            else:
                raise AssertionError(f"the fleet never said it waits for its store: {''.join(seen)}")
            server.start()
            out, err = fleet.communicate(timeout=300)
        finally:
            if fleet.poll() is None:
                fleet.kill()
        assert fleet.returncode == 0, err
        assert json.loads(out)["done"] == 5, (out, err)
    finally:
        server.stop()
