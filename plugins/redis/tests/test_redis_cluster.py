"""A private Redis Cluster (3 masters, a replica each): the contract, the locks, budgets, and a fleet under faults.

Every server here is private (``redis_cluster.PrivateCluster``, on free ports,
stopped afterwards). The fleet test moves the hive's and a pool's slots to
other masters and SIGKILLs a master while a fleet drains, each fault after a
given number of items was handled (events, not sleeps), and checks every item
DONE with the result of its final claim.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis_cluster
import redis_contracts
from redis_cluster import PrivateCluster
from redis_server import new_prefix
from workhive_redis import RedisLocks, RedisStorage, parse_url
from workhive_redis.cluster import ClusterClient

import workhive
from workhive.errors import ConfigError, ItemNotFound, StorageUnavailable
from workhive.models import ItemState
from workhive.testing import StorageStatefulContract
from workhive.testing.budgets import BudgetContract
from workhive.testing.clock import ManualClock
from workhive.testing.locks import LockContract

HERE = pathlib.Path(__file__).resolve().parent
_cluster: PrivateCluster | None = None
_prefixes: dict[pathlib.Path, str] = {}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    """One cluster for the suites of this module (the fleet test kills a master: it starts its own)."""
    global _cluster
    cluster = PrivateCluster(tmp_path_factory.mktemp("cluster"), node_timeout_ms=redis_cluster.CALM_NODE_TIMEOUT_MS)
    try:
        cluster.start()
        _cluster = cluster
        yield cluster
    finally:
        _cluster = None
        cluster.stop()


def _url(tmp_path: pathlib.Path) -> str:
    assert _cluster is not None
    prefix = _prefixes.get(tmp_path)
    if prefix is None:
        prefix = _prefixes[tmp_path] = new_prefix()
    return f"{_cluster.url}?prefix={prefix}"


# -- URLs --------------------------------------------------------------------------------------
def test_a_cluster_url_lists_its_nodes_and_hides_the_password() -> None:
    cfg = parse_url("redis+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2,[::1]:7002/?prefix=p&retry_for=5")
    assert cfg.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert (cfg.cluster, cfg.prefix, cfg.username, cfg.password) == (True, "p", "app", "s3cret")
    assert cfg.display == "redis+cluster://10.0.0.1:7000,10.0.0.2:6379,[::1]:7002/0"
    for text in (repr(cfg), cfg.display, cfg.where, RedisStorage("redis+cluster://:s3cret@h:1/").where):
        assert "s3cret" not in text
    tls = parse_url("rediss+cluster://h:7000/?ssl_cert_reqs=none")
    assert tls.cluster and tls.tls == {"ssl_cert_reqs": "none"}


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("redis+cluster://h:7000/3", "only database 0"),
        ("redis+cluster://h:7000,,h:7001/", "empty node"),
        ("redis+cluster://h:7000,h:99999/", "malformed"),
        ("redis+cluster://h:7000/?ssl_ca_certs=/x", "unknown option"),
    ],
)
def test_malformed_cluster_urls_are_refused(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RedisStorage(url)


def test_the_plugin_opens_cluster_urls() -> None:
    from workhive.plugin_manager import default_manager

    manager = default_manager()
    for scheme in ("redis+cluster", "rediss+cluster"):
        assert manager.get("storage", scheme).name == "redis"
        assert manager.get("locks", scheme).name == "redis"


# -- on the cluster ------------------------------------------------------------------------------
@pytest.mark.usefixtures("shared_cluster")
class TestRedisClusterContract(redis_contracts.TestRedisDeploymentContract):
    """The storage contract on the cluster: the masters' TIME, moved forward through ``clock_offset``."""

    def store_url(self, tmp_path: pathlib.Path) -> str:
        return _url(tmp_path)


@pytest.mark.usefixtures("shared_cluster")
class TestRedisClusterStatefulContract(StorageStatefulContract):
    """The model test on the cluster: the masters' TIME, moved forward through ``clock_offset``."""

    clock_drift = 5.0  # the most real time one storage call takes (the server's clock runs meanwhile)

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> RedisStorage:
        offset = clock.offset if isinstance(clock, ManualClock) else None
        return RedisStorage(_url(tmp_path), clock_offset=offset)


@pytest.mark.usefixtures("shared_cluster")
class TestRedisClusterLockContract(LockContract):
    persistent_tokens = True

    def make_provider(self, tmp_path: pathlib.Path) -> RedisLocks:
        return RedisLocks(_url(tmp_path))


@pytest.mark.usefixtures("shared_cluster")
class TestRedisClusterBudgetContract(BudgetContract):
    def make_backend(self, clock: ManualClock, tmp_path: pathlib.Path) -> RedisStorage:
        return RedisStorage(_url(tmp_path), clock_offset=clock.offset)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return _url(tmp_path), {}


def _pools_on_distinct_masters(cluster: PrivateCluster, prefix: str, count: int) -> list[str]:
    """Pool names whose slots are served by ``count`` different masters."""
    chosen: dict[int, str] = {}
    for n in range(10_000):
        name = f"pool{n}"
        port = cluster.owner(ClusterClient.slot_of("{" + prefix + "/" + name + "}"))[1]
        chosen.setdefault(port, name)
        if len(chosen) == count:
            return list(chosen.values())
    raise AssertionError("no pool names spread over the masters")


def test_a_plain_url_at_a_cluster_node_says_to_use_redis_cluster_and_leaves_nothing_listed(
    shared_cluster: PrivateCluster,
) -> None:
    prefix = new_prefix()
    hive_port = shared_cluster.owner(ClusterClient.slot_of("{" + prefix + "}"))[1]
    other = _pools_on_distinct_masters(shared_cluster, prefix, 3)
    elsewhere = next(
        p for p in other if shared_cluster.owner(ClusterClient.slot_of(f"{{{prefix}/{p}}}"))[1] != hive_port
    )
    stray = next(p for p in other if p != elsewhere)

    async def plain() -> None:
        # The hive's own slot is on this node: opening works, the pool's slot is not.
        async with workhive.open(f"redis://127.0.0.1:{hive_port}/0?prefix={prefix}") as hive:
            with pytest.raises(StorageUnavailable, match=r"answered MOVED \d+ 127.0.0.1:\d+: this server is part of a "
                               r"Redis Cluster: use redis\+cluster://127.0.0.1:"):  # fmt: skip
                await hive.pool(elsewhere).push({"n": 1})

    async def clustered() -> None:
        async with workhive.open(f"{shared_cluster.url}?prefix={prefix}") as hive:
            # The failed push stored nothing, so nothing is listed; every other pool works.
            assert await hive.storage.pools() == []
            await hive.pool(stray).push({"n": 2})
            await hive.pool(elsewhere).push({"n": 3})
            assert await hive.storage.pools() == sorted([stray, elsewhere])
            assert (await hive.pool(elsewhere).stats()).pending == 1

    asyncio.run(plain())
    asyncio.run(clustered())


def test_a_script_waits_while_its_slot_migrates_and_then_runs_whole(shared_cluster: PrivateCluster) -> None:
    """Item keys move first, the sets a claim declares stay behind: the claim must not run half here, half there."""
    cluster = shared_cluster
    prefix, name = new_prefix(), "moving"
    slot = ClusterClient.slot_of(f"{{{prefix}/{name}}}")

    async def main() -> None:
        async with workhive.open(f"{cluster.url}?prefix={prefix}") as hive:
            pool = hive.pool(name)
            await pool.push_many([{"n": i} for i in range(40)])
            await pool.push({"later": True}, delay=3600)  # the delayed set exists
            first = await pool.claim("w0", lease=600)  # and so does the leases set
            assert first is not None
            source = cluster.owner(slot)[1]
            target = next(port for _, port in cluster.masters() if port != source)
            cluster.begin_migration(slot, target)
            with cluster.client(source) as c:
                keys = c.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
            items = [k for k in keys if ":i:" in k]
            cluster.move_keys(slot, target, items[: len(items) // 2])
            refused = cluster.refusals()
            claiming = asyncio.ensure_future(pool.claim_many(100, "w1", lease=600))
            # Refused (TRYAGAIN/ASK) while the slot is split; it cannot finish before the migration does.
            while cluster.refusals() == refused:
                assert not claiming.done(), f"the claim ran on a slot in mid-migration: {claiming.result()!r}"
                await asyncio.sleep(0.01)
            assert not claiming.done()
            cluster.finish_migration(slot, target)
            claimed = await claiming
            assert len(claimed) == 39 and first.id not in {i.id for i in claimed}
            stats = await pool.stats()
            assert (stats.pending, stats.delayed, stats.claimed) == (0, 1, 40)
            for item in claimed:
                stored = await pool.get(item.id)
                assert stored is not None and stored.state is ItemState.CLAIMED and stored.claimed_by == "w1"
            assert cluster.owner(slot)[1] == target

    asyncio.run(main())


def test_a_wrong_password_on_a_cluster_is_refused_at_once_without_showing_it(shared_cluster: PrivateCluster) -> None:
    url = shared_cluster.url.replace("redis+cluster://", "redis+cluster://nobody:n0t-the-Pa55@") + "?prefix=p"

    async def main() -> None:
        with pytest.raises(StorageUnavailable, match="refused the login") as info:
            async with workhive.open(url):
                pass
        assert "n0t-the-Pa55" not in str(info.value)

    asyncio.run(main())


def test_a_url_at_a_plain_server_says_it_is_no_cluster(tmp_path: pathlib.Path) -> None:
    from redis_server import PrivateRedis

    server = PrivateRedis(tmp_path)
    server.start()
    try:

        async def main() -> None:
            with pytest.raises(StorageUnavailable, match="not part of a Redis Cluster"):
                async with workhive.open(f"redis+cluster://127.0.0.1:{server.port}/?prefix=p"):
                    pass

        asyncio.run(main())
    finally:
        server.stop()


def test_writes_a_failover_loses_are_the_ones_the_readme_names(tmp_path: pathlib.Path) -> None:
    """A completion and a push the dead master acknowledged but never replicated: the item runs again, the push is gone.

    The replica is stopped (SIGSTOP) and its link cut while the master
    acknowledges both, then the master is killed and the replica, continued, takes over without them.
    The worker's next heartbeat gives back its claims in that pool instead of
    extending a claim it already finished, so the item is claimable again.
    """
    cluster = PrivateCluster(tmp_path / "cluster")
    try:
        cluster.start()
        prefix, name = "lossy", "jobs"
        slot = ClusterClient.slot_of(f"{{{prefix}/{name}}}")
        url = f"{cluster.url}?prefix={prefix}&retry_for=60"

        async def main() -> None:
            async with workhive.open(url) as hive:
                pool = hive.pool(name)
                kept = await pool.push({"n": 1})
                worker = (await hive.workers.register(pools=["jobs"])).worker_id
                item = await pool.claim(worker, lease=600)
                assert item is not None and item.id == kept
                redis_cluster._until("the claim replicated", cluster.replicated)
                master = cluster.owner(slot)[1]
                replica = cluster.replica_of(master)
                assert replica.process is not None
                replica.process.send_signal(signal.SIGSTOP)
                try:
                    # Cut the link too: what the master writes from now on stays in its backlog.
                    with cluster.client(master) as c:
                        assert c.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
                    await pool.complete(item, {"first": True})  # acknowledged by the master only
                    gone = await pool.push({"n": 2})  # so is this push
                    assert (await pool.get(item.id)).state is ItemState.DONE
                    index = next(i for i, n in enumerate(cluster.nodes) if n.port == master)
                    cluster.nodes[index].kill()
                    cluster.dead.add(index)
                finally:
                    replica.process.send_signal(signal.SIGCONT)
                redis_cluster._until("the replica took over", lambda: cluster.serves(slot, replica.port))
                # The completion is lost: the replica shows the item still claimed by the worker.
                again = await pool.get(item.id)
                assert again is not None and again.state is ItemState.CLAIMED and again.claimed_by == worker
                with pytest.raises(ItemNotFound):  # a push acknowledged but never replicated is lost
                    await pool.get(gone)
                # The heartbeat does not keep that claim alive: it gives it back, attempt unspent.
                await hive.workers.heartbeat(worker)
                back = await pool.get(item.id)
                assert back is not None and back.state is ItemState.PENDING and back.attempts == 0
                rerun = await pool.claim("w2", lease=60)
                assert rerun is not None and rerun.id == item.id and rerun.token > item.token
                await pool.complete(rerun, {"token": rerun.token})
                final = await pool.get(item.id)
                assert final is not None and final.result == {"token": final.token}

        asyncio.run(main())
    finally:
        cluster.stop()


# -- a fleet while slots move and a master fails over ---------------------------------------------
#: items per pool; the pools hit by the faults have more, so they are still draining when hit
PER_POOL = 300


def _handled(log: pathlib.Path) -> list[tuple[float, str, int]]:
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        at, item_id, token, _pid = line.split()
        rows.append((float(at), item_id, int(token)))
    return rows


def _wait_for(
    what: str, check: Callable[[], bool], procs: list[subprocess.Popen[bytes]], alive: int, timeout: float
) -> None:
    """Wait for ``check``; the fleet ``procs[alive]`` must not exit meanwhile, the others only drained (exit 0)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert procs[alive].poll() is None, f"the fleet {alive} exited before {what}"
        assert all(p.poll() in (None, 0) for p in procs), f"a fleet failed before {what}"
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.05)


def _stall(times: list[float], start: float) -> float:
    """The longest gap from ``start`` on between ``times`` (the first counts from ``start``)."""
    after = [start, *sorted(t for t in times if t >= start)]
    return max((b - a for a, b in itertools.pairwise(after)), default=0.0)


def test_a_fleet_drains_while_slots_move_and_a_master_fails_over(tmp_path: pathlib.Path) -> None:
    cluster = PrivateCluster(tmp_path / "cluster")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        cluster.start()
        prefix = "drain"
        url = f"{cluster.url}?prefix={prefix}&retry_for=60"
        pools = _pools_on_distinct_masters(cluster, prefix, 3)
        sizes = dict(zip(pools, (2 * PER_POOL, 3 * PER_POOL, PER_POOL)))
        total = sum(sizes.values())

        async def push() -> dict[str, list[str]]:
            async with workhive.open(url) as hive:
                return {p: await hive.pool(p).push_many([{"n": i} for i in range(sizes[p])]) for p in pools}

        pushed = asyncio.run(push())
        # What the fleet starts from is on the replicas too: only what happens during the drain is at risk.
        redis_cluster._until("the pushed items replicated", cluster.replicated)
        log = tmp_path / "handled.log"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               "WORKHIVE_CLUSTER_LOG": str(log)}  # fmt: skip
        # The pool whose master is killed is worked slowest (50 ms an item), so it is still
        # draining however long the migration before the kill takes on a loaded machine.
        slow = {pools[1]: "0.05"}
        for pool in pools:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "workhive",
                        "--storage",
                        url,
                        "work",
                        pool,
                        "--handler",
                        "redis_cluster:record",
                        "--processes",
                        "1",
                        "--concurrency",
                        "4",
                        "--until-empty",
                        "--lease",
                        "10",
                        "--heartbeat",
                        "1",
                        "--progress",
                        "none",
                    ],
                    env={**env, "WORKHIVE_CLUSTER_SLEEP": slow.get(pool, "0.02")},
                    cwd=tmp_path,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        hive_slot = ClusterClient.slot_of("{" + prefix + "}")
        moved_slot = ClusterClient.slot_of("{" + prefix + "/" + pools[0] + "}")

        pool_of = {i: p for p, ids in pushed.items() for i in ids}

        def handled(pool: str) -> int:
            return sum(1 for _, item_id, _ in _handled(log) if pool_of[item_id] == pool)

        # Fault 1, once a quarter of the first pool is handled: its slot and the hive's move to other masters.
        _wait_for(f"a quarter of {pools[0]} handled", lambda: handled(pools[0]) >= PER_POOL // 4, procs, 0, 120)
        reshard_at = time.time()
        ports = [port for _, port in cluster.masters()]
        for slot in (moved_slot, hive_slot):
            here = cluster.owner(slot)[1]
            keys = cluster.migrate_slot(slot, next(p for p in ports if p != here))
            assert keys > 0
        resharded_at = time.time()
        # Fault 2, once half the second pool is handled: its master dies; its replica takes over.
        _wait_for(f"a third of {pools[1]} handled", lambda: handled(pools[1]) >= sizes[pools[1]] // 3, procs, 1, 120)
        failover_at = time.time()
        victim = cluster.owner(ClusterClient.slot_of("{" + prefix + "/" + pools[1] + "}"))[1]
        cluster.kill_master(victim)
        taken_over_at = time.time()
        for proc in procs:
            _out, err = proc.communicate(timeout=150)
            assert proc.returncode == 0, f"a fleet exited with {proc.returncode}: {err.decode()[-3000:]}"

        async def final() -> dict[str, list[Any]]:
            async with workhive.open(url, create=False) as hive:
                out: dict[str, list[Any]] = {}
                for p in pools:
                    stats = await hive.pool(p).stats()
                    assert (stats.pending, stats.delayed, stats.claimed, stats.poisoned) == (0, 0, 0, 0), stats
                    out[p] = await hive.pool(p).items(ItemState.DONE, limit=10 * sizes[p])
                return out

        done = asyncio.run(final())
        rows = _handled(log)
        runs = Counter(item_id for _, item_id, _ in rows)
        finished = {item.id: item for items in done.values() for item in items}
        lost = [i for ids in pushed.values() for i in ids if i not in finished]
        assert lost == [], f"pushed before the faults, acknowledged and replicated, yet gone: {lost[:5]}"
        assert set(finished) == {i for ids in pushed.values() for i in ids}, "an item nobody pushed is DONE"
        for item in finished.values():
            # The stored result is the one of the item's final claim (a rerun's, after a failover).
            assert item.result == {"token": item.token, "pid": item.result["pid"]}, item
            assert runs[item.id] >= 1
        duplicates = sum(c - 1 for c in runs.values())
        # The faults landed mid-drain: each pool hit had items left to handle afterwards.
        assert any(pool_of[i] == pools[0] and t > resharded_at for t, i, _ in rows), "pool 0 drained before the move"
        assert any(pool_of[i] == pools[1] and t > failover_at for t, i, _ in rows), "pool 1 drained before the kill"

        def stall(pool: str, start: float, end: float = float("inf")) -> float:
            """The longest time between two completions the store kept (finished_at) in ``pool``, from ``start``."""
            return _stall(
                [i.finished_at for i in done[pool] if i.finished_at is not None and i.finished_at < end], start
            )

        print(
            f"\ncluster drain: {total} items in {len(pools)} pools on 3 masters (1 replica each), a fleet of 4 "
            f"workers per pool (20 ms an item, {pools[1]} 50 ms); slots of the hive and of {pools[0]} migrated "
            f"once {PER_POOL // 4} of its items were handled ({resharded_at - reshard_at:.2f} s), the master of "
            f"{pools[1]} SIGKILLed once {sizes[pools[1]] // 3} of its items were (its replica served the dead "
            f"master's slots {taken_over_at - failover_at:.2f} s later): DONE {len(finished)}, duplicates "
            f"{duplicates}, lost {len(lost)}; longest time without a completion: {pools[0]} from the migration's "
            f"start {stall(pools[0], reshard_at, failover_at):.2f} s, {pools[1]} from the kill "
            f"{stall(pools[1], failover_at):.2f} s"
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        cluster.stop()
