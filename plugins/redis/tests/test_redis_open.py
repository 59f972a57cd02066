"""Opening a store: URL forms, options, create=False, bad input, the CLI; never the password, nothing changed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis as redis_py
from redis_server import REDIS_URL, SECRET, PrivateRedis, keys_of, new_prefix, url_for
from workhive_redis import RedisLocks, RedisStorage, parse_url

import workhive
from workhive.errors import (
    ConfigError,
    HiveNotFound,
    StorageUnavailable,
)
from workhive.models import ItemState
from workhive.testing.environment import workhive_free_env


@pytest.mark.parametrize(
    ("url", "match"),
    [
        (f"redis://:{SECRET}@127.0.0.1:6379/0?nope=1", "unknown option"),
        (f"redis://:{SECRET}@127.0.0.1:6379/0?prefix=a{{b}}", "prefix"),
        (f"redis://:{SECRET}@127.0.0.1:6379/x", "database"),
        (f"redis://:{SECRET}@127.0.0.1:6379/0?db=1", "twice"),
        (f"redis://:{SECRET}@127.0.0.1:6379/0?retry_for=-1", "retry_for"),
        (f"redis://:{SECRET}@127.0.0.1:99999/0", "malformed"),
        ("unix://relative.sock", "absolute"),
        ("http://127.0.0.1:6379", "not a Redis URL"),
    ],
)
def test_malformed_urls_are_refused_without_the_password(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        RedisStorage(url)
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.__dict__)


def test_the_password_never_shows(tmp_path: Path) -> None:
    cfg = parse_url(f"redis://user:{SECRET}@127.0.0.1:6379/3?prefix=p")
    backend = RedisStorage(f"redis://user:{SECRET}@127.0.0.1:6379/3?prefix=p")
    for text in (repr(cfg), repr(backend), backend.where, backend.url, cfg.display):
        assert SECRET not in text
    assert (cfg.where, cfg.db, cfg.username) == ("127.0.0.1:6379", 3, "user")


def test_create_false_on_an_empty_prefix_raises_and_writes_nothing() -> None:
    prefix = new_prefix()

    async def main() -> None:
        with pytest.raises(HiveNotFound, match=prefix):
            async with workhive.open(url_for(prefix), create=False):
                pass

    asyncio.run(main())
    assert keys_of(prefix) == []


def test_a_server_that_persists_nothing_says_so() -> None:
    async def main() -> None:
        async with workhive.open(url_for(new_prefix())) as hive:
            notices = await hive.storage.notices()  # type: ignore[attr-defined]
            client = redis_py.Redis.from_url(REDIS_URL.split("?")[0], decode_responses=True)
            try:
                config = client.config_get("appendonly") | client.config_get("save")
            finally:
                client.close()
            if config["appendonly"] == "no" and not config["save"].strip():
                assert len(notices) == 1 and "persists nothing" in notices[0]
            else:
                assert all("persists nothing" not in n for n in notices)

    asyncio.run(main())


def test_replies_are_read_as_resp3_whatever_the_drivers_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py 8 speaks RESP3 unless told otherwise, 5-7 RESP2: the backend asks for RESP3 itself.

    Under RESP2 an item's HGETALL comes back a flat list and reading it failed (seen with redis-py 7.4).
    Here the driver's default is forced to RESP2 and the backend must still read what it stored.
    """
    import redis.asyncio.connection as connection

    real_init = connection.AbstractConnection.__init__

    def resp2_by_default(self: object, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("protocol", 2)
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(connection.AbstractConnection, "__init__", resp2_by_default)
    assert parse_url(url_for(new_prefix())).connection_kwargs()["protocol"] == 3

    async def roundtrip() -> None:
        async with workhive.open(url_for(new_prefix())) as hive:
            pool = hive.pool("jobs")
            item_id = await pool.push({"a": 1})
            assert (await pool.get(item_id)).data == {"a": 1}
            claimed = await pool.claim("w1")
            assert claimed is not None
            await pool.complete(claimed)
            assert (await pool.get(item_id)).state is ItemState.DONE

    asyncio.run(roundtrip())


# -- passwords with raw reserved characters, options given twice (issue 24) -------------------
RESERVED = ["@", "?", "#", "/", ":"]


def canary(char: str) -> str:
    """A password whose every piece carries the canary, so any fragment that shows is caught."""
    return f"ssCANARY1{char}ssCANARY2{char}ssCANARY3"


def assert_no_canary(*texts: object) -> None:
    for text in texts:
        assert "CANARY" not in str(text), f"a piece of the password leaked into: {text}"


@pytest.mark.parametrize("char", RESERVED)
def test_config_errors_never_show_a_piece_of_a_password_with_reserved_characters(char: str) -> None:
    password = canary(char)
    for url in (
        f"redis://user:{password}@127.0.0.1:6379/0?nope=1",
        f"redis://:{password}@127.0.0.1:6379/0?prefix=a{{b}}",
        f"rediss://user:{password}@127.0.0.1:6379/x",
        f"redis://user:{password}@127.0.0.1:6379/0?retry_for=-1",
        f"redis://user:{password}@127.0.0.1:6379/0?prefix=a&prefix=b",
    ):
        for make in (RedisStorage, RedisLocks, lambda u: workhive.open(u), parse_url):
            with pytest.raises(ConfigError) as info:
                make(url)
            assert_no_canary(str(info.value), repr(info.value), repr(vars(info.value)))
    with pytest.raises(ConfigError) as info:
        parse_url(f"http://user:{password}@127.0.0.1:6379")
    assert_no_canary(str(info.value), repr(vars(info.value)))


@pytest.mark.parametrize("char", ["?", "#", "/"])
def test_a_password_that_would_be_read_as_host_port_or_db_is_refused_saying_to_percent_encode(char: str) -> None:
    # redis://user:6379/x@host would otherwise connect to host "user", port 6379.
    for url in (f"redis://user:{canary(char)}@127.0.0.1:6379/0", f"redis://user:6379{char}ssCANARY1@127.0.0.1/0"):
        with pytest.raises(ConfigError, match="Percent-encode") as info:
            parse_url(url)
        assert_no_canary(str(info.value), repr(vars(info.value)))
        assert "@127.0.0.1" in str(info.value)  # the rest of the URL is still shown


@pytest.mark.parametrize("char", ["@", ":"])
def test_a_raw_at_sign_or_colon_in_the_password_is_read_whole(char: str) -> None:
    cfg = parse_url(f"redis://user:{canary(char)}@127.0.0.1:6380/2")
    assert (cfg.password, cfg.where, cfg.db) == (canary(char), "127.0.0.1:6380", 2)
    assert_no_canary(repr(cfg), cfg.display, RedisStorage(f"redis://user:{canary(char)}@127.0.0.1:6380/2").where)


@pytest.mark.parametrize("char", ["@", ":"])
def test_an_unreachable_server_error_shows_no_piece_of_the_password(char: str) -> None:
    async def main() -> None:
        with pytest.raises(StorageUnavailable, match=r"127\.0\.0\.1:1\b") as info:
            async with workhive.open(f"redis://user:{canary(char)}@127.0.0.1:1/0?retry_for=0.3"):
                pass
        assert_no_canary(str(info.value), repr(vars(info.value)))

    asyncio.run(main())


def test_percent_encoded_and_raw_at_colon_passwords_log_in_and_a_wrong_one_is_refused_unshown(
    tmp_path: Path,
) -> None:
    password = "ssCANARY1@ss?CANARY2#ss/CANARY3:x"
    server = PrivateRedis(tmp_path, "--requirepass", password)
    server.start()
    encoded = "ssCANARY1%40ss%3FCANARY2%23ss%2FCANARY3%3Ax"
    try:

        async def main() -> None:
            async with workhive.open(f"redis://:{encoded}@127.0.0.1:{server.port}/0?prefix=enc") as hive:
                await hive.pool("jobs").push("a")
            wrong = "ssCANARY1@ssCANARY2:x"  # raw @ and : are read as urlsplit reads them
            with pytest.raises(StorageUnavailable, match="refused the login") as info:
                async with workhive.open(f"redis://:{wrong}@127.0.0.1:{server.port}/0?retry_for=0.3"):
                    pass
            assert_no_canary(str(info.value), repr(vars(info.value)))

        asyncio.run(main())
    finally:
        server.stop()


@pytest.mark.parametrize("option", ["prefix", "retry_for", "db", "lease", "timeout"])
def test_an_option_given_twice_is_refused_naming_it_and_nothing_is_written(option: str) -> None:
    first, second = new_prefix(), new_prefix()
    values = {"prefix": (first, second), "retry_for": ("1", "2"), "db": ("0", "0"), "lease": ("1", "5"),
              "timeout": ("3", "4")}[option]  # fmt: skip
    query = f"{option}={values[0]}&{option}={values[1]}" + ("" if option == "prefix" else f"&prefix={first}")
    url = f"{REDIS_URL.split('?')[0].rsplit('/', 1)[0]}/0?{query}"

    async def main() -> None:
        with pytest.raises(ConfigError, match=f"gives '{option}' twice: give each option once"):
            async with workhive.open(url) as hive:
                await hive.pool("jobs").push("x")
        with pytest.raises(ConfigError, match=f"'{option}' twice"):
            locks = RedisLocks(url)
            try:
                await locks.release(await locks.acquire("l", timeout=0, worker_id="w"))
            finally:
                await locks.close()

    asyncio.run(main())
    assert keys_of(first) == [] and keys_of(second) == []


@pytest.mark.parametrize("char", RESERVED)
def test_the_cli_shows_no_piece_of_the_password_in_config_status_or_errors(char: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    prefix = new_prefix()
    host = REDIS_URL.split("//", 1)[1].split("/", 1)[0].rpartition("@")[2]
    # The shared server's default user takes any password through HELLO AUTH (it has nopass);
    # raw @ and : are read whole, so those URLs work, while / ? # are refused.
    url = f"redis://default:{canary(char)}@{host}/0?prefix={prefix}"
    env = workhive_free_env()
    (tmp_path / "items.jsonl").write_text('{"n": 1}\n')
    runs = [
        subprocess.run([sys.executable, "-m", "workhive", "--storage", url, *args], capture_output=True, text=True,
                       timeout=120, env=env, cwd=tmp_path)
        for args in (["config"], ["config", "--json"], ["push", "jobs", "items.jsonl"], ["status"],
                     ["status", "--json"])
    ]  # fmt: skip
    for run in runs:
        assert_no_canary(run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
    assert runs[0].returncode == 0 and runs[1].returncode == 0
    for run in runs[2:]:
        if char in "/?#":
            assert run.returncode != 0 and "Percent-encode" in run.stderr, run.stderr
        else:
            assert run.returncode == 0, run.stderr
    if char not in "/?#":
        assert "jobs" in runs[3].stdout


@pytest.mark.parametrize("char", RESERVED)
def test_a_fleet_refusing_its_lock_url_shows_no_piece_of_the_password(char: str) -> None:
    from workhive.runtime.fleet import check_lock_provider
    from workhive.runtime.options import FleetOptions

    # An unknown option makes every one of these URLs unusable, whatever the password holds.
    locks = f"redis://user:{canary(char)}@127.0.0.1:6379/0?nope=1"
    hive = workhive.open(url_for(new_prefix()), locks=locks)
    options = FleetOptions(pool="jobs", handler="mod:fn", storage=url_for(new_prefix()), locks=locks)
    with pytest.raises(ConfigError, match="--locks") as info:
        check_lock_provider(hive, options)
    assert_no_canary(str(info.value), repr(vars(info.value)))
