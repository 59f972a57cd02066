"""Bad input and hostile servers: a specific error naming host:port (never the password), nothing changed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis as redis_py
from redis_server import REDIS_URL, PrivateRedis, new_prefix, url_for
from workhive_redis import RedisLocks, RedisStorage, parse_url, schema
from workhive_redis.connections import RedisClient
from workhive_redis.keys import HiveKeys

import workhive
from workhive.errors import (
    ConfigError,
    HiveNotFound,
    InvalidItem,
    SchemaVersionError,
    StorageError,
    StorageUnavailable,
)
from workhive.models import ItemState

SECRET = "s3cret-Pa55word"


def _keys(prefix: str, base: str = REDIS_URL) -> list[str]:
    client = redis_py.Redis.from_url(base.split("?")[0], decode_responses=True)
    try:
        return sorted(k for pattern in (f"{{{prefix}}}*", f"{{{prefix}/*") for k in client.scan_iter(match=pattern))
    finally:
        client.close()


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


def test_create_false_on_an_empty_prefix_raises_and_writes_nothing() -> None:
    prefix = new_prefix()

    async def main() -> None:
        with pytest.raises(HiveNotFound, match=prefix):
            async with workhive.open(url_for(prefix), create=False):
                pass

    asyncio.run(main())
    assert _keys(prefix) == []


def test_a_hive_created_by_another_process_while_this_one_opens_is_not_foreign(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes opening a new prefix at once: the one that looks second sees the first's version key.

    The other process is simulated where the race is: between reading that there is no version key
    and scanning the prefix for foreign keys.
    """
    prefix = new_prefix()
    looked = schema.find_keys

    async def other_process_opens_first(client: RedisClient, keys: HiveKeys) -> str | None:
        monkeypatch.setattr(schema, "find_keys", looked)
        async with workhive.open(url_for(prefix)):  # creates the hive's version record
            pass
        return await looked(client, keys)  # finds that record: no version key when TYPE was asked, one now

    async def main() -> None:
        monkeypatch.setattr(schema, "find_keys", other_process_opens_first)
        async with workhive.open(url_for(prefix)) as hive:
            await hive.pool("p").push({"n": 1})
        async with workhive.open(url_for(prefix), create=False) as hive:
            assert (await hive.pool("p").stats()).pending == 1

    asyncio.run(main())


def test_many_processes_opening_one_new_prefix_at_once_all_open() -> None:
    prefix = new_prefix()

    async def main() -> None:
        hives = [workhive.open(url_for(prefix)) for _ in range(12)]
        try:
            await asyncio.gather(*(h.open() for h in hives))
        finally:
            await asyncio.gather(*(h.close() for h in hives))

    asyncio.run(main())


def test_foreign_keys_or_a_newer_layout_under_the_prefix_are_refused_and_left_alone() -> None:
    foreign, newer = new_prefix(), new_prefix()
    client = redis_py.Redis.from_url(REDIS_URL.split("?")[0], decode_responses=True)
    try:
        client.set(f"{{{foreign}}}:something", "theirs")
        client.hset(f"{{{newer}}}:version", mapping={"by": "workhive-redis", "schema": "99"})
    finally:
        client.close()

    async def main() -> None:
        with pytest.raises(StorageError, match="another program"):
            async with workhive.open(url_for(foreign)):
                pass
        with pytest.raises(SchemaVersionError, match="newer"):
            async with workhive.open(url_for(newer)):
                pass

    asyncio.run(main())
    assert _keys(foreign) == [f"{{{foreign}}}:something"]
    assert _keys(newer) == [f"{{{newer}}}:version"]


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
            with pytest.raises(StorageUnavailable, match="scripting"):
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
    assert _keys(first) == [] and _keys(second) == []


@pytest.mark.parametrize("char", RESERVED)
def test_the_cli_shows_no_piece_of_the_password_in_config_status_or_errors(char: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    prefix = new_prefix()
    host = REDIS_URL.split("//", 1)[1].split("/", 1)[0].rpartition("@")[2]
    # The shared server's default user takes any password through HELLO AUTH (it has nopass);
    # raw @ and : are read whole, so those URLs work, while / ? # are refused.
    url = f"redis://default:{canary(char)}@{host}/0?prefix={prefix}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKHIVE_")}
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
