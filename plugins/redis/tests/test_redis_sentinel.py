"""``redis+sentinel://``: URL forms, bad input, discovery errors, and a demoted master's READONLY followed.

Issue 26: ``redis+sentinel://`` was "no storage plugin named 'redis+sentinel'".
The tests that need servers start a private set-up (``redis_sentinel_server``:
a master, a replica, three sentinels on free ports); none touches the shared
server. Every wait is for a state the servers report, never a duration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_py
import workhive_redis.plugin
from redis_sentinel_server import SERVICE, SentinelSetup
from redis_server import SECRET
from workhive_redis import RedisLocks, RedisStorage, parse_url
from workhive_redis.sentinel import SentinelConfig

import workhive
from workhive.defaults import default_locks_url
from workhive.errors import ConfigError, StorageError, StorageUnavailable
from workhive.plugin_manager import PluginManager
from workhive.testing.processes import free_port
from workhive.urls import redact_url


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel"))
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


# -- URLs, no server -----------------------------------------------------------------
def test_the_url_names_the_sentinels_the_service_the_database_and_every_redis_option(tmp_path: Path) -> None:
    (tmp_path / "sentinel-pw").write_text("sentinel-only-secret\n")
    url = (
        f"redis+sentinel://app:{SECRET}@10.0.0.1,10.0.0.2:26380,[::1]:26381/{SERVICE}/2"
        f"?prefix=billing&retry_for=45&timeout=3&lease=4&sentinel_username=watcher"
        f"&sentinel_password_file={tmp_path / 'sentinel-pw'}"
    )
    cfg = parse_url(url)
    assert isinstance(cfg, SentinelConfig)
    assert cfg.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("::1", 26381))
    assert (cfg.service, cfg.db, cfg.prefix, cfg.retry_for, cfg.timeout, cfg.lease) == (SERVICE, 2, "billing", 45, 3, 4)
    assert (cfg.username, cfg.password) == ("app", SECRET)
    assert (cfg.sentinel_username, cfg.sentinel_password) == ("watcher", "sentinel-only-secret")
    assert cfg.where == f"service {SERVICE!r} via sentinels 10.0.0.1:26379,10.0.0.2:26380,[::1]:26381"
    assert parse_url(f"redis+sentinel://h/{SERVICE}?db=3").db == 3
    for text in (repr(cfg), cfg.where, cfg.display, RedisStorage(url).where, repr(RedisLocks(url))):
        assert SECRET not in text and "sentinel-only-secret" not in text


def test_rediss_sentinel_takes_the_tls_options_and_plain_sentinel_refuses_them(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("read when a connection is made\n")
    cfg = parse_url(f"rediss+sentinel://h1,h2/{SERVICE}?ssl_ca_certs={tmp_path / 'ca.pem'}")
    assert cfg.scheme == "rediss+sentinel" and cfg.connection_kwargs()["ssl_ca_certs"] == str(tmp_path / "ca.pem")
    with pytest.raises(ConfigError, match=r"unknown option.*ssl_ca_certs"):
        parse_url(f"redis+sentinel://h1,h2/{SERVICE}?ssl_ca_certs={tmp_path / 'ca.pem'}")


@pytest.mark.parametrize(
    ("url", "match"),
    [
        (f"redis+sentinel://:{SECRET}@/{SERVICE}", "names no sentinel"),
        (f"redis+sentinel://:{SECRET}@,/{SERVICE}", "names no sentinel"),
        (f"redis+sentinel://:{SECRET}@h1:26379,h2:26380", "names no service"),
        (f"redis+sentinel://:{SECRET}@h1:26379,h2:26380/", "names no service"),
        (f"redis+sentinel://:{SECRET}@h1:26379,h2:x/{SERVICE}", "malformed sentinel address 'h2:x'"),
        (f"redis+sentinel://:{SECRET}@h1,h1/{SERVICE}", "names a sentinel twice"),
        (f"redis+sentinel://:{SECRET}@h1/{SERVICE}/x", "database"),
        (f"redis+sentinel://:{SECRET}@h1/{SERVICE}/1?db=2", "twice"),
        (f"redis+sentinel://:{SECRET}@h1/{SERVICE}/1/2", "more than /SERVICE/db"),
        (f"redis+sentinel://:{SECRET}@h1/{SERVICE}?nope=1", "unknown option.*sentinel_password_file"),
        (f"redis+sentinel://:{SECRET}@h1/{SERVICE}?prefix=a{{b}}", "prefix"),
        (f"redis+sentinel://:{SECRET}@h1/{SERVICE}?retry_for=-1", "retry_for"),
        (f"redis+sentinel://h1/{SERVICE}?sentinel_password={SECRET}&sentinel_password_file=/x", "keep only one"),
        (f"redis+sentinel://h1/{SERVICE}?sentinel_password_file=/nonexistent/pw", "no such file"),
    ],
)
def test_malformed_sentinel_urls_are_refused_saying_what_to_write_without_a_password(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        RedisStorage(url)
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.__dict__)
    assert "Sentinel URL" in str(info.value) or "in 'redis+sentinel://" in str(info.value)


def test_the_plugin_answers_the_sentinel_schemes_for_storage_and_locks_and_locks_default_to_the_url() -> None:
    manager = PluginManager(entry_points=False, extra=[("redis", workhive_redis.plugin)])
    url = f"redis+sentinel://127.0.0.1:26379/{SERVICE}?prefix=p&sentinel_password={SECRET}"
    for scheme in ("redis+sentinel", "rediss+sentinel"):
        assert manager.get("storage", scheme).name == "redis"
        assert manager.get("locks", scheme).name == "redis"
    assert default_locks_url(url, manager) == url
    hive = workhive.open(url, manager=manager)  # built, not connected
    locks = hive.locks()
    assert isinstance(locks, RedisLocks) and locks.config == hive.storage.config  # type: ignore[attr-defined]
    assert SECRET not in repr(locks) and SECRET not in hive.storage.where  # type: ignore[attr-defined]
    assert SECRET not in redact_url(url)


# -- discovery against private sentinels -------------------------------------------------
def test_a_service_the_sentinels_do_not_monitor_is_a_config_error_naming_it_and_them(
    sentinels: SentinelSetup,
) -> None:
    url = sentinels.url("wh-unknown").replace(f"/{SERVICE}?", "/no-such-service?")

    async def main() -> None:
        with pytest.raises(ConfigError, match="no sentinel monitors a service named 'no-such-service'") as info:
            async with workhive.open(url):
                pass
        for sentinel in sentinels.sentinels:
            assert f"127.0.0.1:{sentinel.port}: does not monitor" in str(info.value)

    asyncio.run(main())


def test_unreachable_sentinels_are_storage_unavailable_naming_each_without_a_password() -> None:
    ports = [free_port() for _ in range(2)]
    url = (
        f"redis+sentinel://:{SECRET}@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/{SERVICE}"
        f"?prefix=wh-gone&retry_for=0&sentinel_password={SECRET}x"
    )

    async def main() -> None:
        with pytest.raises(StorageUnavailable, match=f"no master for service {SERVICE!r}") as info:
            async with workhive.open(url):
                pass
        message = str(info.value)
        assert all(f"127.0.0.1:{port}: unreachable" in message for port in ports), message
        assert SECRET not in message

    asyncio.run(main())


def test_a_sentinel_that_is_down_is_skipped_for_one_that_answers(sentinels: SentinelSetup) -> None:
    hosts = ",".join([f"127.0.0.1:{free_port()}"] + [f"127.0.0.1:{s.port}" for s in sentinels.sentinels])
    url = f"redis+sentinel://{hosts}/{SERVICE}?prefix=wh-skip"

    async def main() -> None:
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push({"n": 1})
            assert (await hive.pool("jobs").stats()).pending == 1
            assert hive.storage._client._kwargs["port"] == sentinels.named_master()[1]  # type: ignore[attr-defined,index]

    asyncio.run(main())


def test_a_plain_url_to_a_replica_is_still_refused_not_retried(sentinels: SentinelSetup) -> None:
    """READONLY is followed only behind Sentinel; redis:// to a replica says so at once, as before."""

    async def main() -> None:
        url = f"redis://127.0.0.1:{sentinels.replica.port}/0?prefix=wh-replica&retry_for=600"
        with pytest.raises(StorageError, match="read only replica"):
            async with workhive.open(url):
                pass

    asyncio.run(main())


def test_a_master_demoted_by_a_failover_answers_readonly_and_the_client_follows_the_promoted_one(
    sentinels: SentinelSetup,
) -> None:
    """SENTINEL FAILOVER keeps the old master running, as a replica: the client's idle connection to it
    gets READONLY (counted by that server), nothing is applied there, and the write lands on the new master.
    Runs last in this module: it swaps the set-up's roles."""
    old, new = sentinels.master.port, sentinels.replica.port
    url = sentinels.url("wh-demoted")

    def failover() -> None:
        sentinels.replicate_everything()
        watcher = redis_py.Redis(port=sentinels.sentinels[0].port, decode_responses=True)
        try:
            watcher.execute_command("SENTINEL", "FAILOVER", SERVICE)
        finally:
            watcher.close()
        sentinels.wait_for_promotion()
        sentinels.wait_until_demoted(old)

    async def main() -> None:
        async with workhive.open(url, locks=url) as hive:
            pool = hive.pool("jobs")
            await pool.push({"n": 1})
            client = hive.storage._client  # type: ignore[attr-defined]
            assert client._kwargs["port"] == old and client._idle, "an idle connection to the master"
            # In a thread, so that this loop keeps running meanwhile, as a worker's would.
            await asyncio.to_thread(failover)
            await pool.push({"n": 2})
            assert client._kwargs["port"] == new and client.failovers == 1
            assert (await pool.stats()).pending == 2
            async with hive.lock("after-failover", timeout=10) as held:
                assert held.token >= 1

    asyncio.run(main())
    assert sentinels.readonly_errors(old) >= 1, "the write never reached the demoted master"
    on_new = redis_py.Redis(port=new, decode_responses=True)
    try:
        assert on_new.zcard("{wh-demoted/jobs}:ready") == 2
    finally:
        on_new.close()
