"""``RedisStorage``: the workhive storage contract on Redis, one Lua script per operation.

* Every operation that changes anything is one ``EVALSHA`` of a script in
  ``lua/`` (``workhive_redis.luafiles``), so it is atomic on the server; the
  script reads the server's ``TIME`` (plus ``clock_offset``, which tests use to
  move time forward), never the worker's clock.
* A pool's keys share one hash tag (``workhive_redis.keys``), so each pool
  script touches one slot. What spans pools is done pool by pool, each step
  atomic, in an order that stays correct if the caller dies half way:
  a worker's heartbeat is accepted or refused in the registry first (a lost
  worker's is refused), then its leases are extended in each pool it claimed
  from; ``reap`` declares a worker lost in one step (from then on its
  heartbeats are refused), then releases its items pool by pool, and only
  then clears it from the ``reaping`` set, so the next ``reap`` finishes
  what a crashed reaper left.
* ``wait_for_work`` blocks on pub/sub (``workhive_redis.wakeups``): scripts
  publish when they make work claimable; delayed items and leases are waited
  for until their time, never polled.
* Connection failures are retried as ``workhive_redis.connections`` says and
  reported as ``workhive_redis.failures`` words them; the version record is
  ``workhive_redis.schema``'s, rate budgets ``workhive_redis.budget``'s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from workhive.budgets import BudgetTake
from workhive.errors import (
    InvalidItem,
    StorageError,
    WorkerLost,
    WorkerNotFound,
)
from workhive.ids import is_item_id
from workhive.models import (
    Ack,
    GroupReport,
    GroupStats,
    ItemState,
    NewItem,
    PoolStats,
    ReapedWorker,
    StepRecord,
    WorkerFilter,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
)
from workhive.schedules import Schedule
from workhive_redis.budget import take_budget
from workhive_redis.cluster import client_for
from workhive_redis.keys import HiveKeys, PoolKeys
from workhive_redis.schedules import RedisSchedules
from workhive_redis.schema import SCHEMA_VERSION, ensure_schema
from workhive_redis.url import RedisConfig, parse_url
from workhive_redis.wakeups import Wakeups

__all__ = ["SCHEMA_VERSION", "RedisStorage"]

#: the largest payload, result or error text accepted (Redis itself allows 512 MiB per value,
#: but one huge value holds the single-threaded server for every worker while it is copied)
MAX_VALUE_BYTES = 16 * 1024 * 1024
#: items per script call for push_many and complete_many: bounds how long one script holds the server
BATCH = 1000
#: purge deletes at most this many items per script call
PURGE_CHUNK = 1000

_STATES = {s.value: s for s in ItemState}
_WORKER_STATES = {s.value: s for s in WorkerStatus}


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _num(value: float) -> str:
    return repr(float(value))


class RedisStorage:
    """Storage on a Redis server; what ``workhive.open("redis://…")`` builds.

    ``clock_offset`` (seconds, read at every call) is added to the server's
    clock: the contract suite passes ``clock_offset=clock.offset`` to move
    time. ``clock`` (tests only) replaces the server's time altogether with
    a callable's, for tests that predict exact times (the model test).
    ``create=False`` opens only a hive that exists (``HiveNotFound``
    otherwise) and writes nothing.

    >>> async def main():  # doctest: +SKIP
    ...     async with workhive.open("redis://127.0.0.1:6379/0?prefix=billing") as hive:
    ...         await hive.pool("invoices").push({"id": 42})
    """

    capabilities = frozenset({"notify", "multiprocess"})

    def __init__(
        self,
        url: str,
        *,
        clock_offset: Callable[[], float] | None = None,
        create: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.config: RedisConfig = parse_url(url)
        self.url = self.config.display
        self._offset = clock_offset
        self._clock = clock
        self._create = create
        self.keys = HiveKeys(self.config.prefix)
        self._client = client_for(self.config)
        self._schedules = RedisSchedules(self._client, self.keys, self._pk, self.where)
        self._wakeups = Wakeups(self._client)
        self._pool_keys: dict[str, PoolKeys] = {}
        self._pool_numbers: dict[str, int] = {}
        self._claimed_from: set[tuple[str, str]] = set()
        #: (worker, pool) -> failovers of the pool's slot already handled (clusters: see _failed_over)
        self._slot_failovers_seen: dict[tuple[str, str], int] = {}
        self._open = False
        # Behind Sentinel (workhive_redis.sentinel): the claims this process holds and has not
        # finished, pool -> item id -> (worker, token), and the failovers each worker's heartbeat saw.
        self._holding: dict[str, dict[str, tuple[str, int]]] = {}
        self._failovers_seen: dict[str, int] = {}

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<RedisStorage {self.config.display} prefix={self.config.prefix!r} {state}>"

    @property
    def where(self) -> str:
        """Where the hive lives, for messages: ``redis://host:port/db prefix 'name'`` (no password)."""
        return f"{self.config.display} prefix {self.config.prefix!r}"

    def _off(self) -> str:
        """What scripts take as their clock (see lua/includes/clock.lua)."""
        if self._clock is not None:
            return "=" + _num(self._clock())
        return "0" if self._offset is None else _num(self._offset())

    # -- lifecycle ----------------------------------------------------------
    async def open(self) -> None:
        if self._open:
            return
        await self._client.open(retry_for=min(self.config.retry_for, 5.0))
        try:
            await ensure_schema(self._client, self.keys, self.config, create=self._create)
        except BaseException:
            await self._client.close()
            raise
        self._open = True

    async def close(self) -> None:
        self._open = False
        await self._wakeups.close()
        await self._client.close()

    async def now(self) -> float:
        if self._clock is not None:
            return self._clock()
        seconds, micros = await self._client.command("TIME")
        return int(seconds) + int(micros) / 1_000_000 + (0.0 if self._offset is None else self._offset())

    async def notices(self) -> list[str]:
        """Facts a user should see next to this store's status: here, what the server persists.

        >>> await backend.notices()  # doctest: +SKIP
        ['Redis at 127.0.0.1:6379 persists nothing (no AOF, no RDB snapshots): a server restart loses the hive']
        """
        where = self.config.where
        try:
            reply = await self._client.pipeline(
                [("CONFIG", "GET", "appendonly"), ("CONFIG", "GET", "appendfsync"), ("CONFIG", "GET", "save")],
                write=False,
            )
        except StorageError:
            return [
                f"Redis at {where} does not show its persistence settings (CONFIG is not allowed): make sure it "
                "runs with appendonly yes, or a restart loses the hive"
            ]
        settings: dict[str, str] = {}
        for pair in reply:
            settings.update(pair if isinstance(pair, dict) else dict(zip(pair[::2], pair[1::2])))
        aof = settings.get("appendonly") == "yes"
        rdb = bool(settings.get("save", "").strip())
        if not aof and not rdb:
            return [f"Redis at {where} persists nothing (no AOF, no RDB snapshots): a server restart loses the hive"]
        if not aof:
            return [
                f"Redis at {where} only takes RDB snapshots (save {settings.get('save')}): a restart loses what "
                "changed since the last one; appendonly yes keeps every acknowledged change"
            ]
        if settings.get("appendfsync") == "no":
            return [
                f"Redis at {where} writes an AOF but leaves flushing to the OS (appendfsync no): a machine crash "
                "can lose the last ~30 s of changes"
            ]
        return []

    # -- helpers ------------------------------------------------------------
    def _pk(self, pool: str) -> PoolKeys:
        keys = self._pool_keys.get(pool)
        if keys is None:
            keys = self._pool_keys[pool] = PoolKeys(self.config.prefix, pool)
        return keys

    async def _pool_number(self, pool: str) -> int:
        number = self._pool_numbers.get(pool)
        if number is None:
            number = int(await self._client.run("pool_index", (self.keys.pools, self.keys.poolseq), (pool,)))
            self._pool_numbers[pool] = number
        return number

    def _claiming(self, pool: str, worker_id: str) -> list[tuple[Any, ...]]:
        """Commands to send before this worker's first claim in ``pool`` from this process (see keys.py)."""
        if (worker_id, pool) in self._claimed_from:
            return []
        return [("SADD", self.keys.worker_pools(worker_id), pool)]

    async def _claim_call(
        self, pool: str, worker_id: str, script: str, keys: tuple[str, ...], args: tuple[Any, ...]
    ) -> Any:
        failovers = getattr(self._client, "slot_failovers", None)
        if failovers is not None:  # counted before the claim: one during it makes the next heartbeat release
            self._slot_failovers_seen.setdefault((worker_id, pool), int(failovers(keys[0])))
        before = self._claiming(pool, worker_id)
        sha = self._client.scripts[script].sha
        call = ("EVALSHA", sha, len(keys), *keys, *args)
        if not before:
            return (await self._client.pipeline([call], write=True))[0]
        replies = await self._client.pipeline([*before, call], write=True)
        self._claimed_from.add((worker_id, pool))
        return replies[-1]

    @staticmethod
    def _check_size(text: str | None, what: str) -> None:
        if text is not None and len(text) > MAX_VALUE_BYTES // 4 and len(text.encode("utf-8")) > MAX_VALUE_BYTES:
            raise InvalidItem(
                f"{what} is {len(text.encode('utf-8')):,} bytes as JSON; Redis storage takes at most "
                f"{MAX_VALUE_BYTES:,} per value: store large data elsewhere and push a reference to it"
            )

    @staticmethod
    def _claimed(reply: list[Any], start: int, pool: str, worker_id: str, lease: float) -> list[WorkItem]:
        if len(reply) <= start:
            return []
        expires = float(reply[start])
        items = []
        for i in range(start + 1, len(reply), 12):
            r = reply[i : i + 12]
            item = WorkItem(
                r[0], pool, r[1], ItemState.CLAIMED, int(r[2]), int(r[3]), int(r[4]), int(r[5]),
                float(r[6]), float(r[7]), worker_id, expires, lease, r[8], r[9], None, None, int(r[10]), group=r[11],
            )  # fmt: skip
            items.append(item)
        return items

    @staticmethod
    def _item(item_id: str, pool: str, h: dict[str, Any]) -> WorkItem:
        return WorkItem(
            item_id, pool, h["p"], _STATES[h["st"]], int(h["pr"]), int(h["at"]), int(h["ma"]), int(h["tk"]),
            float(h["ca"]), float(h["aa"]), h.get("cb"), _f(h.get("le")), _f(h.get("ls")), h.get("dk"),
            h.get("er"), h.get("rs"), _f(h.get("fa")), int(h.get("rl", 0)), group=h.get("gr"),
        )  # fmt: skip

    # -- items --------------------------------------------------------------
    async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        if not items:
            return []
        for new in items:
            self._check_size(new.payload, "item data")
        number = await self._pool_number(pool)
        k = self._pk(pool)
        keys = (k.ready, k.delayed, k.seq, k.dedup, k.n)
        ids: list[str] = []
        batch: list[Any] = []
        for start in range(0, len(items), BATCH):
            args: list[Any] = [self._off(), number, k.wake]
            for new in items[start : start + BATCH]:
                args += (new.payload, new.priority, _num(new.delay), new.max_attempts, new.dedup_key or "")
                args.append(new.group or "")
            batch.append(("EVALSHA", self._client.scripts["push"].sha, len(keys), *keys, *args))
        # Chunks run one after another on the server, so a dedup key repeated
        # across chunks still finds the item an earlier chunk pushed.
        for reply in await self._client.pipeline(batch, write=True):
            ids += reply
        return ids

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        k = self._pk(pool)
        reply = await self._claim_call(
            pool, worker_id, "claim", (k.ready, k.delayed, k.leases), (self._off(), worker_id, limit, _num(lease))
        )
        return self._hold(pool, self._claimed(reply, 0, pool, worker_id, float(lease)))

    async def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]:
        if not acks:
            return []
        k = self._pk(pool)
        keys = (k.ready, k.leases, k.done)
        sha = self._client.scripts["complete"].sha
        if len(acks) == 1:
            # The worker loop's completion: the batching below, for one ack, without its bookkeeping.
            ack = acks[0]
            self._check_size(ack.result, "the result")
            accepted = False
            if is_item_id(ack.item_id):
                call = ("EVALSHA", sha, 3, *keys, self._off(), ack.item_id, ack.token, ack.result or "")
                accepted = (await self._client.pipeline([call], write=True))[0][0] == 1
            self._let_go(pool, ack.item_id, ack.token)
            return [accepted]
        out: list[bool] = [False] * len(acks)
        calls: list[Any] = []
        places: list[list[int]] = []
        args: list[Any] = []
        place: list[int] = []
        for index, ack in enumerate(acks):
            self._check_size(ack.result, "the result")
            if not is_item_id(ack.item_id):
                continue
            args += (ack.item_id, ack.token, ack.result or "")
            place.append(index)
            if len(place) == BATCH:
                calls.append(("EVALSHA", sha, len(keys), *keys, self._off(), *args))
                places.append(place)
                args, place = [], []
        if place:
            calls.append(("EVALSHA", sha, len(keys), *keys, self._off(), *args))
            places.append(place)
        if calls:
            for reply, where in zip(await self._client.pipeline(calls, write=True), places):
                for index, ok in zip(where, reply):
                    out[index] = ok == 1
        for ack in acks:
            self._let_go(pool, ack.item_id, ack.token)
        return out

    async def complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        self._check_size(ack.result, "the result")
        if not is_item_id(ack.item_id):
            return False, []
        k = self._pk(pool)
        reply = await self._claim_call(
            pool,
            worker_id,
            "complete_and_claim",
            (k.ready, k.delayed, k.leases, k.done),
            (self._off(), ack.item_id, ack.token, ack.result or "", worker_id, limit, _num(lease)),
        )
        self._let_go(pool, ack.item_id, ack.token)
        if reply == 0:
            return False, []
        return True, self._hold(pool, self._claimed(reply, 1, pool, worker_id, float(lease)))

    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None:
        if not is_item_id(item_id):
            return None
        self._check_size(error, "the error text")
        k = self._pk(pool)
        reply = await self._client.run(
            "fail",
            (k.ready, k.delayed, k.leases, k.dead),
            (self._off(), item_id, token, error, _num(retry_in), "1" if poison else "0", k.wake),
        )
        self._let_go(pool, item_id, token)
        return None if reply == 0 else _STATES[reply]

    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool:
        if not is_item_id(item_id):
            return False
        k = self._pk(pool)
        reply = await self._client.run(
            "release", (k.ready, k.delayed, k.leases), (self._off(), item_id, token, _num(delay), k.wake)
        )
        self._let_go(pool, item_id, token)
        return bool(reply == 1)

    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None:
        if not is_item_id(item_id):
            return None
        k = self._pk(pool)
        reply = await self._client.run("extend", (k.ready, k.leases), (self._off(), item_id, token, _num(lease)))
        return None if reply == 0 else float(reply)

    async def get(self, pool: str, item_id: str) -> WorkItem | None:
        if not is_item_id(item_id):
            return None
        h = await self._client.command("HGETALL", self._pk(pool).item(item_id))
        return self._item(item_id, pool, h) if h else None

    async def list_items(self, pool: str, state: ItemState, limit: int, offset: int = 0) -> list[WorkItem]:
        k = self._pk(pool)
        await self.stats(pool)  # settles expired leases and due items first
        if state is ItemState.PENDING:
            ranges = [("ZRANGE", k.ready, 0, -1), ("ZRANGE", k.gready, 0, -1), ("ZRANGE", k.delayed, 0, -1)]
            replies = await self._client.pipeline(ranges, write=False)
            ids = [member[14:] for member in replies[0] + replies[1]] + list(replies[2])
        else:
            index = {
                ItemState.CLAIMED: k.leases,
                ItemState.DONE: k.done,
                ItemState.POISONED: k.dead,
                ItemState.CANCELLED: k.cancelled,
            }[state]
            ids = list(await self._client.command("ZRANGE", index, 0, -1))
        # Ids of one pool share their first digits and count up: text order is push order.
        chosen = sorted(ids)[offset : offset + limit]
        if not chosen:
            return []
        records = await self._client.pipeline([("HGETALL", k.item(i)) for i in chosen], write=False)
        return [self._item(i, pool, h) for i, h in zip(chosen, records) if h and h.get("st") == state.value]

    async def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        k = self._pk(pool)
        if item_ids is not None:
            item_ids = [i for i in dict.fromkeys(item_ids) if is_item_id(i)]
            if not item_ids:
                return 0
        return int(
            await self._client.run("requeue", (k.ready, k.dead, k.dedup), (self._off(), k.wake, *(item_ids or ())))
        )

    def _release_worker_call(self, pool: str, worker_id: str, spend: bool) -> tuple[Any, ...]:
        k = self._pk(pool)
        keys = (k.ready, k.leases, k.held(worker_id))
        sha = self._client.scripts["release_worker"].sha
        return ("EVALSHA", sha, len(keys), *keys, self._off(), worker_id, "1" if spend else "0", k.wake)

    async def _release_everywhere(self, worker_id: str, spend: bool) -> tuple[int, int]:
        pools = sorted(await self._client.command("SMEMBERS", self.keys.worker_pools(worker_id)))
        if not pools:
            return 0, 0
        replies = await self._client.pipeline(
            [self._release_worker_call(p, worker_id, spend) for p in pools], write=True
        )
        return sum(int(r[0]) for r in replies), sum(int(r[1]) for r in replies)

    async def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int:
        self._let_go_of_worker(pool, worker_id)
        if pool is not None:
            call = self._release_worker_call(pool, worker_id, spend_attempt)
            reply = (await self._client.pipeline([call], write=True))[0]
            return int(reply[0]) + int(reply[1])
        return sum(await self._release_everywhere(worker_id, spend_attempt))

    async def purge(self, pool: str, older_than: float) -> int:
        k = self._pk(pool)
        total = 0
        while True:
            deleted = int(
                await self._client.run(
                    "purge", (k.done, k.dead, k.n), (self._off(), _num(older_than), PURGE_CHUNK, k.base)
                )
            )
            total += deleted
            if deleted < PURGE_CHUNK:
                return total

    # -- durable steps (KeepsSteps, rules ST1-ST5) --------------------------
    async def step_put(self, pool: str, item_id: str, token: int, key: str, payload: str, failed: bool) -> bool:
        if not is_item_id(item_id):
            return False
        k = self._pk(pool)
        reply = await self._client.run(
            "step_put", (k.ready, k.steps(item_id)), (self._off(), item_id, token, key, payload, "1" if failed else "0")
        )
        return bool(int(reply))

    async def step_list(self, pool: str, item_id: str) -> list[StepRecord]:
        if not is_item_id(item_id):
            return []
        stored = await self._client.command("HGETALL", self._pk(pool).steps(item_id))
        records = []
        for key, value in stored.items():
            n, failed, token, stored_at, payload = value.split("\t", 4)
            records.append((int(n), StepRecord(key, payload, failed == "1", int(token), float(stored_at))))
        return [record for _, record in sorted(records, key=lambda pair: pair[0])]

    async def step_clear(self, pool: str, item_ids: Sequence[str]) -> int:
        ids = [i for i in dict.fromkeys(item_ids) if is_item_id(i)]
        if not ids:
            return 0
        return int(await self._client.run("step_clear", (self._pk(pool).ready,), tuple(ids)))

    async def stats(self, pool: str) -> PoolStats:
        k = self._pk(pool)
        r = await self._client.run("stats", (k.ready, k.delayed, k.leases, k.done, k.dead), (self._off(),))
        return PoolStats(pool, int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), _f(r[5]), cancelled=int(r[6]))

    async def cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        k = self._pk(pool)
        valid = [i for i in item_ids if is_item_id(i)]
        reply = list(await self._client.run("cancel", (k.ready, k.cancelled), (self._off(), *valid))) if valid else []
        found = dict(zip(valid, reply))
        return [_STATES[found[i]] if found.get(i) else None for i in item_ids]

    # -- groups (workhive.storage.ServesGroups, rules GR1-GR9; lua/includes/groups.lua) --
    async def _group_set(self, pool: str, what: str, group: str | None, value: str) -> None:
        await self._client.run("group_set", (self._pk(pool).ready,), (self._off(), what, group or "", value))

    async def set_group_weight(self, pool: str, group: str, weight: float) -> None:
        """Group ``group``'s share of claims while backlogged (default 1)."""
        await self._group_set(pool, "weight", group, _num(weight))

    async def set_group_limit(self, pool: str, group: str | None, limit: int | None) -> None:
        """At most ``limit`` unexpired claims of ``group`` (None: every named group's default; limit None: none)."""
        value = "" if limit is None else str(int(limit))
        await self._group_set(pool, "default" if group is None else "limit", group, value)

    async def set_pool_limit(self, pool: str, limit: int | None) -> None:
        """At most ``limit`` unexpired claims in the pool (None: no limit)."""
        await self._group_set(pool, "pool", None, "" if limit is None else str(int(limit)))

    async def pause_group(self, pool: str, group: str, seconds: float | None) -> None:
        """Claims skip ``group`` until the server's now + ``seconds``; None resumes it."""
        await self._group_set(pool, "pause", group, "" if seconds is None else _num(seconds))

    async def group_report(self, pool: str) -> GroupReport:
        """The pool's limits and every group with a live item or a setting of its own, counted now."""
        r = await self._client.run("group_report", (self._pk(pool).ready,), (self._off(),))
        groups = tuple(
            GroupStats(
                group=r[i] or None,
                weight=float(r[i + 1]),
                limit=_int(r[i + 2]),
                in_flight=int(r[i + 3]),
                ready=int(r[i + 4]),
                waiting=int(r[i + 5]),
                paused_until=_f(r[i + 6]),
            )
            for i in range(2, len(r), 7)
        )
        return GroupReport(pool=pool, pool_limit=_int(r[0]), default_limit=_int(r[1]), groups=groups)

    async def pools(self) -> list[str]:
        names = sorted(await self._client.command("HKEYS", self.keys.pools))
        if not names:
            return []
        counts = await self._client.pipeline([("GET", self._pk(n).n) for n in names], write=False)
        return [n for n, c in zip(names, counts) if c is not None and int(c) > 0]

    async def wait_for_work(self, pool: str, timeout: float) -> None:
        if timeout <= 0:
            return
        k = self._pk(pool)
        wakeups = self._wakeups
        future = wakeups.register(k.wake)
        try:
            try:
                await asyncio.wait_for(wakeups.subscribe(k.wake), timeout)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                return  # no subscriber connection: the caller looks again (and reports a dead server)
            except Exception as exc:  # redis-py's connection errors
                if type(exc).__module__.startswith("redis"):
                    return
                raise
            due = float(await self._client.run("due", (k.ready, k.delayed, k.leases), (self._off(),), write=False))
            if due == 0:
                return
            wait = timeout if due < 0 else min(timeout, due)
            try:
                await asyncio.wait_for(asyncio.shield(future), wait)
            except asyncio.TimeoutError:
                pass
        finally:
            wakeups.unregister(k.wake, None, future)

    # -- workers ------------------------------------------------------------
    @staticmethod
    def _worker(worker_id: str, h: dict[str, Any]) -> WorkerRecord:
        return WorkerRecord(
            worker_id,
            h["host"],
            int(h["pid"]),
            tuple(json.loads(h["pools"])),
            tuple(json.loads(h["caps"])),
            _WORKER_STATES[h["st"]],
            float(h["ra"]),
            float(h["hb"]),
            h.get("dt"),
        )

    async def register_worker(self, registration: WorkerRegistration) -> WorkerRecord:
        keys = self.keys
        r = registration
        now = await self._client.run(
            "register",
            (keys.worker(r.worker_id), keys.workers, keys.wseq, keys.beats),
            (self._off(), r.worker_id, r.host, r.pid, json.dumps(list(r.pools)), json.dumps(list(r.capabilities))),
        )
        at = float(now)
        return WorkerRecord(
            r.worker_id, r.host, r.pid, tuple(r.pools), tuple(r.capabilities), WorkerStatus.STARTING, at, at
        )

    async def heartbeat(self, worker_id: str) -> WorkerRecord:
        keys = self.keys
        reply = await self._client.run("heartbeat", (keys.worker(worker_id), keys.beats), (self._off(), worker_id))
        if reply[0] == 0:
            raise WorkerNotFound(
                f"no worker {worker_id!r} is registered; register it before heartbeating", worker_id=worker_id
            )
        if reply[0] == -1:
            raise WorkerLost(
                f"worker {worker_id!r} was declared lost (no heartbeat since {reply[1]}) and its items were "
                "released; stop working on them and register again",
                worker_id=worker_id,
            )
        record = self._worker(worker_id, dict(zip(reply[1::2], reply[2::2])))
        pools = sorted(await self._client.command("SMEMBERS", keys.worker_pools(worker_id)))
        if pools:
            sha = self._client.scripts["extend_held"].sha
            calls = []
            for pool in pools:
                k = self._pk(pool)
                if self._failed_over(worker_id, pool):
                    calls.append(self._release_worker_call(pool, worker_id, False))
                else:
                    calls.append(("EVALSHA", sha, 2, k.leases, k.held(worker_id), self._off(), worker_id, k.base))
            await self._client.pipeline(calls, write=True)
        if self._client.follows_master and self._client.failovers != self._failovers_seen.setdefault(
            worker_id, self._client.failovers
        ):
            await self._after_failover(worker_id, pools)
        return record

    def _failed_over(self, worker_id: str, pool: str) -> bool:
        """True once after a replica took over ``pool``'s slot since this worker claimed there (clusters only).

        Replication is asynchronous: the promoted replica may lack a completion,
        failure or release its master acknowledged, and then shows the item still
        claimed by this worker, which has moved on. Extending that lease would keep
        the item from everyone for as long as the worker lives, so the heartbeat
        gives back the worker's claims in that pool instead (without spending an
        attempt): each runs again (at-least-once), and the worker's own completion
        of one it still runs is refused by its fencing token.
        """
        failovers = getattr(self._client, "slot_failovers", None)
        if failovers is None:
            return False
        count = int(failovers(self._pk(pool).ready))
        seen = self._slot_failovers_seen.setdefault((worker_id, pool), count)
        if count == seen:
            return False
        self._slot_failovers_seen[(worker_id, pool)] = count
        return True

    # -- Sentinel failovers (workhive_redis.sentinel) --------------------------
    def _hold(self, pool: str, items: list[WorkItem]) -> list[WorkItem]:
        if self._client.follows_master and items:
            holding = self._holding.setdefault(pool, {})
            for item in items:
                holding[item.id] = (str(item.claimed_by), item.token)
                # A failover from here on may lose what this worker finishes: its heartbeat checks.
                self._failovers_seen.setdefault(str(item.claimed_by), self._client.failovers)
        return items

    def _let_go(self, pool: str, item_id: str, token: int) -> None:
        holding = self._holding.get(pool)
        if holding is not None and holding.get(item_id, ("", None))[1] == token:
            del holding[item_id]

    def _let_go_of_worker(self, pool: str | None, worker_id: str) -> None:
        for name, holding in self._holding.items():
            if pool is None or name == pool:
                for item_id in [i for i, (w, _) in holding.items() if w == worker_id]:
                    del holding[item_id]

    async def _after_failover(self, worker_id: str, pools: list[str]) -> None:
        """Give back the claims a failover handed this worker again although this process finished them.

        Replication is asynchronous: a completion (or failure, or release) the
        old master acknowledged may not have reached the replica it promoted,
        where the item is still claimed by this worker, and every heartbeat
        would extend that lease for as long as the worker lives. Such an item
        is in the worker's held set but no longer among this process's claims:
        released here (fenced by its token, no attempt spent), it runs again.
        A claim whose reply was still on its way is released too; its
        completion is then refused, and the item runs again: at-least-once.
        """
        failovers = self._client.failovers
        for pool in pools:
            k = self._pk(pool)
            holding = self._holding.get(pool, {})
            ids = sorted(await self._client.command("SMEMBERS", k.held(worker_id)))
            if not ids:
                continue
            records = await self._client.pipeline([("HMGET", k.item(i), "st", "cb", "tk") for i in ids], write=False)
            for item_id, (state, owner, token) in zip(ids, records):
                if state != ItemState.CLAIMED.value or owner != worker_id or token is None:
                    continue
                if holding.get(item_id) != (worker_id, int(token)):
                    await self.release(pool, item_id, int(token), 0.0)
        self._failovers_seen[worker_id] = failovers

    async def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        keys = self.keys
        done = await self._client.run(
            "set_status",
            (keys.worker(worker_id), keys.beats),
            (worker_id, status.value, "0" if detail is None else "1", detail or ""),
        )
        if not done:
            raise WorkerNotFound(
                f"no worker {worker_id!r} is registered; register it before setting its status", worker_id=worker_id
            )

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        h = await self._client.command("HGETALL", self.keys.worker(worker_id))
        return self._worker(worker_id, h) if h else None

    async def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]:
        ids = await self._client.command("ZRANGE", self.keys.workers, 0, -1)
        if not ids:
            return []
        records = await self._client.pipeline([("HGETALL", self.keys.worker(i)) for i in ids], write=False)
        now = await self.now()
        found = [self._worker(i, h) for i, h in zip(ids, records) if h]
        return [r for r in found if filter.matches(r, now)]

    async def reap(self, threshold: float) -> list[ReapedWorker]:
        keys = self.keys
        reply = await self._client.run(
            "reap", (keys.beats, keys.reaping), (self._off(), _num(threshold), keys.worker_prefix)
        )
        reaped: list[ReapedWorker] = []
        for i in range(0, len(reply), 3):
            worker_id, beat, fresh = reply[i], float(reply[i + 1]), reply[i + 2] == 1
            released, poisoned = await self._release_everywhere(worker_id, True)
            await self._client.run("reaped", (keys.reaping,), (worker_id,))
            if fresh:
                reaped.append(ReapedWorker(worker_id, beat, released, poisoned))
        return reaped

    # -- rate budgets (workhive.budgets.TakesBudget) -------------------------
    async def take_budget(self, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
        """Reserve the soonest of ``choices`` within ``max_wait``, atomically (``workhive_redis.budget``)."""
        return await take_budget(self._client, self.keys.budgets, self._off(), choices, max_wait)

    # -- shared state -------------------------------------------------------
    # -- schedules (workhive.schedules.StoresSchedules) -----------------------
    async def schedule_add(self, schedule: Schedule) -> bool:
        """Store ``schedule`` unless its name is taken (``workhive_redis.schedules``)."""
        self._check_size(schedule.payload, "schedule data")
        return await self._schedules.add(schedule)

    async def schedule_get(self, name: str) -> Schedule | None:
        """The schedule called ``name``, or None."""
        return await self._schedules.get(name)

    async def schedule_list(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await self._schedules.list()

    async def schedule_remove(self, name: str) -> bool:
        """Delete the schedule; False when there was none."""
        return await self._schedules.remove(name)

    async def schedule_fire(self, name: str, tick: float, item: NewItem) -> str | None:
        """Record ``tick`` and push ``item`` in one script, unless a tick at or after it was fired."""
        return await self._schedules.fire(name, tick, item, self._off(), self._pool_number)

    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        self._check_size(value, "the shared value")
        await self._client.run(
            "state_put", self.keys.state(namespace), (self._off(), key, value, "" if ttl is None else _num(ttl))
        )

    async def state_get(self, namespace: str, key: str) -> str | None:
        value = await self._client.run("state_get", self.keys.state(namespace), (self._off(), key), write=False)
        return None if value is None else str(value)

    async def state_scan(self, namespace: str) -> dict[str, str]:
        flat = await self._client.run("state_scan", self.keys.state(namespace), (self._off(),), write=False)
        return dict(sorted(zip(flat[::2], flat[1::2])))

    async def state_delete(self, namespace: str, key: str) -> bool:
        return bool(await self._client.run("state_delete", self.keys.state(namespace), (self._off(), key)) == 1)
