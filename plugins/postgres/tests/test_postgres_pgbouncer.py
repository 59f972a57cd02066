"""PostgreSQL behind a private PgBouncer (``postgres_pgbouncer``), in transaction and in session pooling.

Each bouncer is started on first use, on a free port in front of the tests'
server, and killed when the class (or test) using it ends; each test still has a
schema of its own. In transaction mode the bouncer shares four server connections
among all its clients, so the statements of one client connection run on whichever
is free: no session state (search_path, prepared statements, LISTEN, session locks)
survives from one transaction to the next. Skipped
without ``pgbouncer`` (``apt-get install -y pgbouncer``), except under
``WORKHIVE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import pathlib
import queue
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import postgres_pgbouncer
import postgres_server
import postgres_workers
import pytest
import test_postgres_contract
from postgres_server import schema_for, sql
from test_postgres_contract import _offset

import workhive
from workhive.errors import LockSystemError
from workhive.locks import LockProvider
from workhive.models import ItemState
from workhive.testing.locks import LockContract
from workhive.testing.storage.waiting import WaitingRules
from workhive_postgres import PostgresLocks, PostgresStorage

CTX = mp.get_context("spawn")


@pytest.fixture(autouse=True, scope="class")
def _bouncers_stopped() -> Iterator[None]:
    # Per class (and per test outside one): a bouncer's server connections are slots of the
    # shared server, given back as soon as the tests that needed them are done.
    yield
    postgres_pgbouncer.stop_all()


def _through(mode: str, tmp_path: pathlib.Path, direct: bool = False) -> str:
    return postgres_pgbouncer.bouncer(mode).url(schema_for(tmp_path), direct=direct)


class TestPostgresPgbouncerTransactionContract(test_postgres_contract.TestPostgresContract):
    """The whole contract through transaction pooling, with no direct connection: no LISTEN, so no
    ``notify`` (the wake-up tests skip; waiting polls), and every statement on any server connection."""

    mode = "transaction"

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> PostgresStorage:
        return PostgresStorage(_through(self.mode, tmp_path), clock_offset=_offset(clock))

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> PostgresStorage:
        return PostgresStorage(_through(self.mode, tmp_path), create=False, clock_offset=_offset(clock))

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return _through(self.mode, tmp_path), {}


class TestPostgresPgbouncerSessionWaiting(WaitingRules):
    """The wake-up rules (N1, N2) through session pooling: LISTEN through the bouncer, so ``notify`` holds.

    Not the whole contract again (it was, and took about 40% of this file's time): session pooling
    gives a client one server connection for as long as it is connected, which is transaction
    pooling's case and more, and transaction pooling runs the whole contract above. What session
    pooling adds is session state kept from one statement to the next (LISTEN here, session advisory
    locks in TestPostgresPgbouncerSessionLockContract).
    """

    clock_drift = 5.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> PostgresStorage:
        storage = PostgresStorage(_through("session", tmp_path), clock_offset=_offset(clock))
        assert "notify" in storage.capabilities  # else these tests would skip instead of run
        return storage


class TestPostgresPgbouncerDirectWaiting(WaitingRules):
    """The wake-up rules (N1, N2) through transaction pooling with ``direct_host``: LISTEN there."""

    clock_drift = 5.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> PostgresStorage:
        storage = PostgresStorage(_through("transaction", tmp_path, direct=True), clock_offset=_offset(clock))
        assert "notify" in storage.capabilities  # else these tests would skip instead of run
        return storage


class TestPostgresPgbouncerSessionLockContract(LockContract):
    """Session advisory locks through session pooling (the bouncer's DISCARD ALL frees a gone client's)."""

    persistent_tokens = True

    def make_provider(self, tmp_path: pathlib.Path) -> LockProvider:
        return PostgresLocks(_through("session", tmp_path))


class TestPostgresPgbouncerDirectLockContract(LockContract):
    """Transaction pooling with ``direct_host``: the locks hold their sessions on PostgreSQL itself."""

    persistent_tokens = True

    def make_provider(self, tmp_path: pathlib.Path) -> LockProvider:
        return PostgresLocks(_through("transaction", tmp_path, direct=True))


@pytest.mark.asyncio
async def test_locks_through_transaction_pooling_without_a_direct_host_are_refused_saying_what_to_do(
    tmp_path: pathlib.Path,
) -> None:
    url = _through("transaction", tmp_path)
    schema = url.split("schema=")[1].split("&")[0]
    locks = PostgresLocks(url)  # built (as `workhive work` does for ctx.lock); refused when used
    try:
        for call in (lambda: locks.acquire("repo", timeout=0), lambda: locks.holder("repo"), locks.list_locks):
            with pytest.raises(LockSystemError) as info:
                await call()
            assert "transaction mode" in str(info.value) and "direct_host=" in str(info.value)
    finally:
        await locks.close()
    assert not await postgres_server.schema_exists(schema)  # nothing was created


@pytest.mark.asyncio
async def test_a_bouncer_not_declared_in_the_url_is_named_with_the_option_to_add(tmp_path: pathlib.Path) -> None:
    """Lock sessions ask for TCP keepalives in their startup packet, which PgBouncer refuses: the
    error says the address is a PgBouncer and names ?pgbouncer=, not a bare protocol violation."""
    url = postgres_pgbouncer.bouncer("session").base() + f"?schema={schema_for(tmp_path)}"
    locks = PostgresLocks(url)
    try:
        with pytest.raises(LockSystemError) as info:
            await locks.acquire("repo", timeout=0)
    finally:
        await locks.close()
    assert "looks like a PgBouncer" in str(info.value) and "?pgbouncer=session" in str(info.value)


@pytest.mark.asyncio
async def test_transaction_pooling_hands_a_client_session_to_others_between_statements(
    tmp_path: pathlib.Path,
) -> None:
    """The premise of the contract run above: the server session a hive's statement ran on serves
    another client next (PgBouncer reuses the last one freed), and the hive's next statement runs
    on another session while that client holds it."""
    import asyncpg

    from workhive_postgres import parse_url

    url = _through("transaction", tmp_path) + "&pool_size=1"
    async with workhive.open(url) as hive:
        storage = hive.storage
        assert isinstance(storage, PostgresStorage) and storage.capabilities == {"multiprocess"}
        await hive.pool("jobs").push("x")

        async def backend_pid(conn: Any) -> int:
            return int(await conn.fetchval("SELECT pg_backend_pid()"))

        first = await storage._run("pid", backend_pid)
        other = await asyncpg.connect(**parse_url(url).connect_kwargs())
        try:
            async with other.transaction():  # holds a server session until it ends
                assert await backend_pid(other) == first
                assert await storage._run("pid", backend_pid) != first
                assert (await hive.pool("jobs").stats()).pending == 1
        finally:
            await other.close()


@pytest.mark.asyncio
async def test_large_pushes_of_several_clients_through_transaction_pooling_insert_without_copy(
    tmp_path: pathlib.Path,
) -> None:
    """asyncpg prepares COPY's column query as a named statement even with its statement cache
    off; the next client on that server session prepared the same name and failed. Large pushes
    through transaction pooling insert instead, so client after client pushes."""
    from workhive_postgres.backend import COPY_FROM

    url = _through("transaction", tmp_path) + "&pool_size=1"
    pushed: list[str] = []
    for round in range(3):  # each a new client, whose statement names would start again at 1
        async with workhive.open(url) as hive:
            pushed += await hive.pool("jobs").push_many([{"round": round, "n": i} for i in range(COPY_FROM)])
    assert len(set(pushed)) == 3 * COPY_FROM
    async with workhive.open(url) as hive:
        items = await hive.pool("jobs").items(ItemState.PENDING, limit=2, offset=COPY_FROM - 1)
        assert [item.data for item in items] == [{"round": 0, "n": COPY_FROM - 1}, {"round": 1, "n": 0}]


def test_a_fleet_drains_through_transaction_pooling_each_item_once(tmp_path: pathlib.Path) -> None:
    """Two processes of four claim loops each, through transaction pooling without a direct host
    (no LISTEN: idle loops poll), drain 2,000 items: every item completed once, none twice."""
    url = _through("transaction", tmp_path) + "&pool_size=4"
    n = 2000

    async def push() -> list[str]:
        async with workhive.open(url) as hive:
            return await hive.pool("jobs").push_many([{"n": i} for i in range(n)])

    ids = asyncio.run(push())
    out = CTX.Queue()
    procs = [CTX.Process(target=postgres_workers.drain, args=(url, f"p{i}", 4, 60.0, out)) for i in range(2)]
    for p in procs:
        p.start()
    accepted: list[tuple[str, int]] = []
    reported = 0
    deadline = time.monotonic() + 600
    while reported < len(procs):
        try:
            accepted += out.get(timeout=1.0)[2]
            reported += 1
        except queue.Empty:
            crashed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not crashed, f"a worker process failed (exit codes {crashed})"
            assert time.monotonic() < deadline, "the fleet did not finish in time"
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    counts = Counter(item_id for item_id, _ in accepted)
    assert set(counts) == set(ids), "an item was lost"
    assert max(counts.values()) == 1, "an item was completed twice"
    schema = url.split("schema=")[1].split("&")[0]
    rows = rows_by_state(f'SELECT state, count(*) FROM "{schema}".items GROUP BY state')
    assert rows == {"done": n}


def rows_by_state(query: str) -> dict[str, int]:
    return {r[0]: r[1] for r in asyncio.run(sql(query))}


HANDLERS = """
async def plain(ctx):
    return {"n": ctx.data["n"]}


async def locked(ctx):
    async with ctx.lock("fleet-wide", ttl=60) as held:
        return {"lock_token": held.token}
"""


def _work(workdir: pathlib.Path, url: str, handler: str, n: int) -> list[Any]:
    """Push ``n`` items and run ``workhive work --until-empty`` (two processes) at ``url``; the results."""
    import json
    import os
    import subprocess
    import sys

    (workdir / "pgbouncer_handlers.py").write_text(HANDLERS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(workdir), os.environ.get("PYTHONPATH")])))

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "workhive", "--storage", url, *args],
            input=stdin, capture_output=True, text=True, cwd=workdir, env=env, timeout=300,
        )  # fmt: skip

    pushed = cli("push", "jobs", "-", stdin="".join(f'{{"n": {i}}}\n' for i in range(n)))
    assert pushed.returncode == 0, pushed.stderr
    work = cli(
        "work", "jobs", "--handler", f"pgbouncer_handlers:{handler}", "--processes", "2", "--concurrency", "2",
        "--until-empty", "--progress", "none", "--json",
    )  # fmt: skip
    assert work.returncode == 0, work.stderr[-3000:]

    async def results() -> list[Any]:
        async with workhive.open(url) as hive:
            stats = await hive.pool("jobs").stats()
            assert (stats.done, stats.pending + stats.delayed + stats.claimed + stats.poisoned) == (n, 0)
            return [item.result for item in await hive.pool("jobs").items(ItemState.DONE, limit=n)]

    found = asyncio.run(results())
    assert json.loads(work.stdout)  # the run's report came out as JSON
    return found


def test_workhive_work_drains_through_transaction_pooling_polling_without_locks(tmp_path: pathlib.Path) -> None:
    """`workhive work` through transaction pooling without direct_host: workers poll for work, the
    supervisor's reaper reaps without its lock (refused), and every item is done once."""
    found = _work(tmp_path, _through("transaction", tmp_path), "plain", 200)
    assert sorted(result["n"] for result in found) == list(range(200))


def test_workhive_work_takes_fleet_wide_locks_at_the_direct_host(tmp_path: pathlib.Path) -> None:
    """Through transaction pooling with direct_host, handlers' ctx.lock holds its session on
    PostgreSQL itself: each item holds the lock once, with a fencing token of its own."""
    found = _work(tmp_path, _through("transaction", tmp_path, direct=True), "locked", 6)
    assert len({result["lock_token"] for result in found}) == 6
