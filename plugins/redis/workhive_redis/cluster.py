"""``ClusterClient``: the engine's calls on a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``).

It has ``RedisClient``'s interface (``run``, ``command``, ``pipeline``,
``pubsub``, ``load_scripts``), so the backend, the locks and the budgets use
either without knowing which. Each command goes to the master that serves
its key's hash slot (``redis.crc.key_slot``, the slot map read with
``CLUSTER SLOTS`` from the URL's nodes, then from the masters it found).
Every script touches one slot (``workhive_redis.keys``: a pool's keys share
``{prefix/pool}``, the hive's ``{prefix}``); a call whose keys span slots is
a bug and refused before anything is sent.

Replies the cluster gives instead of running a command, and what follows:

* ``MOVED slot host:port`` (the slot has a new master: a reshard finished, a
  replica was promoted): the slot map is read again and the command sent there.
* ``ASK slot host:port`` (the slot is being migrated and the key has moved
  already): the command is sent to that node after ``ASKING``, once; the
  map is not changed.
* ``TRYAGAIN`` (keys of a slot in migration, some moved), ``CLUSTERDOWN``
  (a master failed and no replica has taken over yet), ``READONLY`` (the
  node was demoted), ``LOADING``: waited out with jittered backoff, reading
  the map again, for up to the URL's ``retry_for`` seconds; then
  ``StorageUnavailable`` says what the cluster kept answering.

None of these ran the command, so retrying cannot apply it twice. A
connection refused is the same (a dead master: the map is read again and,
once a replica is promoted, the command goes there). A connection that
drops while a write is in flight raises ``OutcomeUnknown``, exactly as on
one server (``workhive_redis.connections``); it is never sent again blindly.
That rule is why this is not redis-py's ``RedisCluster``: it resends a
command whose connection failed, which could apply a push or a claim twice.

A script never runs against a slot in mid-migration. Scripts read and write
item keys they cannot declare (a claim finds its items in the ready set),
and a migrating slot has some of those keys on each node. So every script
call also declares one key of its slot that never exists (``{tag}:guard``):
while a slot migrates, a call declaring a key the node lacks gets ``ASK``,
and on the importing node a call with several keys, one missing, gets
``TRYAGAIN``. The pool's calls wait until the migration ends (a stall of
its length, reported by ``bench/redis_cluster.py``) and then run whole on
the new master. Outside a migration the extra key changes nothing.

Times: each script reads the clock of the master that runs it (hive slot:
worker records and locks; a pool's slot: its leases), and ``now()`` reads
the hive slot's master. Keep the cluster's clocks in sync (NTP), as for
several workers on one server.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any

import attrs

from workhive.errors import StorageError, StorageUnavailable
from workhive_redis.connections import RedisClient
from workhive_redis.failures import dropped_in_flight, reason, refusal, tls_problem, unreachable
from workhive_redis.url import RedisConfig

__all__ = ["ClusterClient", "client_for"]

SLOTS = 16384
_FIRST_PAUSE = 0.05
_MAX_PAUSE = 1.0
#: MOVED/ASK followed in a row before waiting between tries (a map changing under our feet)
_MAX_REDIRECTS = 16
#: commands without a key: sent to the master of the hive's slot (its clock is the hive's)
_KEYLESS = frozenset({"TIME", "PING", "CONFIG", "INFO", "CLUSTER"})
#: the suffix of the never-existing key each script call declares in its slot (see the module docstring)
GUARD = ":guard"


def client_for(config: RedisConfig) -> Any:
    """A ``ClusterClient`` for a cluster URL, else a ``RedisClient`` (the same interface)."""
    return ClusterClient(config) if config.cluster else RedisClient(config)


class _Node(RedisClient):
    """Connections to one master: ``RedisClient``'s pool, used one attempt at a time by ``ClusterClient``."""

    def prepare(self) -> None:
        import redis.asyncio.connection as connection
        import redis.exceptions as errors

        self._errors = errors
        self._kwargs = self.config.connection_kwargs()
        tls = self.config.scheme == "rediss"
        self._connection_class = connection.SSLConnection if tls else connection.Connection
        self._closed = False


class _Dropped(Exception):
    """A connection failed; ``sent``: after the commands left (a write then has an unknown outcome)."""

    def __init__(self, exc: BaseException, sent: bool, node: _Node) -> None:
        super().__init__(str(exc))
        self.exc, self.sent, self.node = exc, sent, node


def hash_tag(key: str) -> str:
    """The part of ``key`` the cluster hashes: between the first ``{`` and the next ``}``, if not empty.

    >>> hash_tag("{workhive/emails}:ready")
    'workhive/emails'
    """
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


class ClusterClient(RedisClient):
    """Connections to the masters of one Redis Cluster (see the module docstring for the rules).

    >>> async def main():  # doctest: +SKIP
    ...     client = ClusterClient(parse_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000/?prefix=p"))
    ...     await client.open()
    ...     await client.command("HGETALL", "{p}:version")
    """

    def __init__(self, config: RedisConfig) -> None:
        super().__init__(config)
        self._nodes: dict[tuple[str, int], _Node] = {}
        self._slots: list[tuple[str, int] | None] = [None] * SLOTS
        self._masters: list[tuple[str, int]] = []
        self._hive_slot = self.slot_of("{" + config.prefix + "}")
        self._epoch = 0
        self._mapping: asyncio.Lock | None = None
        #: the last master seen for each slot (never forgotten: failovers are told from reshards by it)
        self._owners: list[tuple[str, int] | None] = [None] * SLOTS
        self._failovers = [0] * SLOTS

    @staticmethod
    def slot_of(key: str) -> int:
        from redis.crc import key_slot

        return int(key_slot(key.encode("utf-8", "surrogatepass"), SLOTS))

    # -- lifecycle ----------------------------------------------------------------
    async def open(self, *, retry_for: float | None = None) -> None:
        """Read the slot map from the URL's nodes (errors say why) and register the scripts on every master."""
        import redis.exceptions as errors

        self._errors = errors
        self._closed = False
        await self._read_map(self._epoch, retry_for=self.config.retry_for if retry_for is None else retry_for)
        await self.load_scripts(retry_for=retry_for)

    async def close(self) -> None:
        self._closed = True
        nodes, self._nodes = list(self._nodes.values()), {}
        for node in nodes:
            await node.close()

    def pubsub(self) -> Any:
        """A redis-py ``PubSub`` on the hive slot's master: a cluster delivers every ``PUBLISH`` to every node."""
        slot = self._hive_slot
        return self._node(self._slots[slot] or self._owners[slot] or self.config.nodes[0]).pubsub()

    async def load_scripts(self, *, retry_for: float | None = None) -> None:
        """``SCRIPT LOAD`` every script on every master."""
        for address in list(self._masters):
            await self._load_on(self._node(address), retry_for)

    async def _load_on(self, node: _Node, retry_for: float | None = None) -> None:
        try:
            await node.load_scripts(retry_for=self.config.retry_for if retry_for is None else retry_for)
        except StorageUnavailable:
            # A master that died since the map was read: its slots' next call reads the map again.
            if len(self._masters) <= 1:
                raise

    def primaries(self) -> list[RedisClient]:
        """One client per master, for what must visit every node (a ``SCAN`` of the prefix)."""
        return [self._node(address) for address in self._masters]

    # -- calls (run and command are RedisClient's: each one command through this pipeline) --
    async def pipeline(
        self,
        commands: Sequence[Sequence[Any]],
        *,
        write: bool,
        retry_for: float | None = None,
        scripts: bool = True,
    ) -> list[Any]:
        """Send ``commands``; their replies, in order (a reply that is an error raises).

        Writes go one slot after another, each run of one slot's commands in
        one round trip, the next run only once the previous one succeeded: a
        caller's order across slots holds (the worker's pool set before its
        first claim in a pool). Reads go in one round trip per master.
        """
        if self._closed:
            raise StorageUnavailable(
                f"Redis storage at {self.config.where} is not open; use `async with hive:` (or await hive.open()) first"
            )
        budget = self.config.retry_for if retry_for is None else retry_for
        calls = [self._routed(command) for command in commands]
        replies: list[Any] = [None] * len(calls)
        runs: list[list[int]] = []
        for index, (slot, _) in enumerate(calls):
            if runs and calls[runs[-1][0]][0] == slot:
                runs[-1].append(index)
            else:
                runs.append([index])
        if write:
            for run in runs:
                await self._settle(run, calls, replies, write=True, budget=budget)
        else:
            await self._settle(list(range(len(calls))), calls, replies, write=False, budget=budget)
        return replies

    def _routed(self, command: Sequence[Any]) -> tuple[int, tuple[Any, ...]]:
        """The slot of ``command`` and the command to send (scripts declare their slot's guard key too)."""
        name = str(command[0]).upper()
        if name in ("EVALSHA", "EVAL"):
            count = int(command[2])
            keys = [str(k) for k in command[3 : 3 + count]]
            slots = {self.slot_of(k) for k in keys}
            if len(slots) != 1:
                raise StorageError(
                    f"workhive-redis bug: one script call names keys of {len(slots)} hash slots ({keys[:4]}); "
                    "on a Redis Cluster every script must touch one slot"
                )
            guard = "{" + hash_tag(keys[0]) + "}" + GUARD
            return slots.pop(), (command[0], command[1], count + 1, *keys, guard, *command[3 + count :])
        if name in _KEYLESS or len(command) < 2:
            return self._hive_slot, tuple(command)
        return self.slot_of(str(command[1])), tuple(command)

    async def _settle(
        self,
        indexes: list[int],
        calls: list[tuple[int, tuple[Any, ...]]],
        replies: list[Any],
        *,
        write: bool,
        budget: float,
    ) -> None:
        """Send ``indexes`` of ``calls`` until each ran, then fill in ``replies`` (see the module docstring).

        One round trip per master (per redirect target) each time round.
        """
        errors = self._errors
        pending = list(indexes)
        asking: dict[int, tuple[str, int]] = {}
        started = time.monotonic()
        deadline = started + budget
        pause = _FIRST_PAUSE
        last: BaseException | None = None
        redirects = 0
        while True:
            epoch = self._epoch
            groups: dict[tuple[tuple[str, int], bool], list[int]] = {}
            for index in pending:
                if index in asking:
                    groups.setdefault((asking[index], True), []).append(index)
                    continue
                slot = calls[index][0]
                address = self._slots[slot]
                if address is None:
                    await self._read_map(epoch, retry_for=max(0.0, deadline - time.monotonic()))
                    address = self._slots[slot]
                    if address is None:
                        raise StorageUnavailable(
                            f"Redis Cluster at {self.config.where}: no master serves hash slot {slot}; "
                            "check the cluster (redis-cli --cluster check host:port)",
                            where=self.config.where,
                        )
                groups.setdefault((address, False), []).append(index)
            again: list[int] = []
            asking_next: dict[int, tuple[str, int]] = {}
            remap = wait = False
            for (target, asked), group in groups.items():
                node = self._node(target)
                try:
                    got = await self._send(node, [calls[i][1] for i in group], asking=asked)
                except _Dropped as dropped:
                    tls = tls_problem(node.config, dropped.exc)
                    if tls is not None:
                        raise tls from None
                    if dropped.sent and write:
                        self._forget(epoch)
                        raise dropped_in_flight(node.config, dropped.exc) from None
                    last, remap, wait = dropped.exc, True, True
                    again += group
                    continue
                for index, reply in zip(group, got):
                    if not isinstance(reply, errors.ResponseError):
                        replies[index] = reply
                    elif isinstance(reply, errors.AskError) and not isinstance(reply, errors.MovedError):
                        asking_next[index] = (reply.host, int(reply.port))
                        again.append(index)
                    elif isinstance(reply, errors.MovedError):
                        self._slots[reply.slot_id] = (reply.host, int(reply.port))
                        last, remap = reply, True
                        again.append(index)
                    elif isinstance(reply, (errors.TryAgainError, errors.ClusterDownError, errors.ReadOnlyError)):
                        last, wait = reply, True
                        remap = remap or not isinstance(reply, errors.TryAgainError)
                        again.append(index)
                    elif isinstance(reply, errors.NoScriptError):
                        await self._load_on(node)
                        again.append(index)
                    else:
                        raise refusal(node.config, errors, reply) from None
            if not again:
                return
            pending = sorted(again)
            asking = asking_next
            if remap:
                self._forget(epoch)
            redirects += 1
            if not wait and redirects <= _MAX_REDIRECTS:
                continue  # MOVED and ASK are followed at once: the new owner has the key
            if time.monotonic() + pause > deadline:
                raise self._gave_up(last, budget)
            await asyncio.sleep(pause * (0.5 + random.random() / 2))
            pause = min(_MAX_PAUSE, pause * 2)

    def _gave_up(self, last: BaseException | None, budget: float) -> StorageError:
        errors = self._errors
        if last is None or isinstance(last, (errors.ConnectionError, errors.TimeoutError, OSError)):
            return unreachable(self.config, last or ConnectionError("no master answered"), budget)
        return StorageUnavailable(
            f"Redis Cluster at {self.config.where} kept answering {type(last).__name__} ({reason(last)}) for "
            f"{budget:g}s (a slot migrating or a master failing over for longer than retry_for); check the "
            "cluster (redis-cli --cluster check host:port) or raise ?retry_for=",
            where=self.config.where,
        )

    async def _send(self, node: _Node, commands: list[tuple[Any, ...]], *, asking: bool) -> list[Any]:
        """One round trip to ``node``: its replies, error replies in place (``_Dropped`` if the connection fails)."""
        errors = self._errors
        if asking:  # each command after its own ASKING: the flag lasts one command
            wire = [c for command in commands for c in (("ASKING",), command)]
        else:
            wire = list(commands)
        sent = False
        conn = None
        try:
            conn = await node._connection()
            packed = conn.pack_commands(wire)
            sent = True
            await conn.send_packed_command(packed, check_health=False)
            replies: list[Any] = []
            for _ in wire:
                try:
                    replies.append(await conn.read_response())
                except errors.BusyLoadingError as exc:  # a ConnectionError subclass, but the connection is fine
                    replies.append(errors.TryAgainError(f"LOADING {exc}"))
                except errors.ResponseError as exc:
                    replies.append(exc)
            node._release(conn)
            conn = None
        except errors.AuthenticationError as exc:  # a ConnectionError subclass, but waiting will not mend it
            raise refusal(node.config, errors, exc) from None
        except (errors.ConnectionError, errors.TimeoutError, OSError) as exc:
            raise _Dropped(exc, sent, node) from None
        finally:
            if conn is not None:
                await node._drop(conn)
        return replies[1::2] if asking else replies

    # -- the slot map -------------------------------------------------------------
    def _node(self, address: tuple[str, int]) -> _Node:
        node = self._nodes.get(address)
        if node is None:
            scheme = "rediss" if self.config.scheme.startswith("rediss") else "redis"
            config = attrs.evolve(self.config, scheme=scheme, host=address[0], port=address[1], nodes=())
            node = self._nodes[address] = _Node(config)
            node.prepare()
        return node

    def _forget(self, epoch: int) -> None:
        """The map read at ``epoch`` is stale: the next call reads it again (once, however many noticed)."""
        if epoch == self._epoch:
            self._slots = [None] * SLOTS

    async def _read_map(self, epoch: int, *, retry_for: float) -> None:
        """``CLUSTER SLOTS`` from the first node that answers (known masters, then the URL's nodes)."""
        if self._mapping is None:
            self._mapping = asyncio.Lock()
        async with self._mapping:
            if epoch != self._epoch and any(self._slots):
                return  # another call read it meanwhile
            errors = self._errors
            deadline = time.monotonic() + retry_for
            pause = _FIRST_PAUSE
            while True:
                last: BaseException | None = None
                candidates = list(dict.fromkeys([*self._masters, *self.config.nodes]))
                random.shuffle(candidates)  # not always the first: it may be the dead one
                for address in candidates:
                    node = self._node(address)
                    try:
                        reply = (await self._send(node, [("CLUSTER", "SLOTS")], asking=False))[0]
                    except _Dropped as dropped:
                        tls = tls_problem(node.config, dropped.exc)
                        if tls is not None:
                            raise tls from None
                        last = dropped.exc
                        continue
                    if isinstance(reply, errors.ResponseError):
                        text = reason(reply)
                        if "cluster support disabled" in text.lower():
                            raise StorageUnavailable(
                                f"Redis at {node.config.where} is not part of a Redis Cluster ({text}); use "
                                f"redis://{node.config.where}/0 for one server",
                                where=node.config.where,
                            )
                        if isinstance(reply, (errors.ClusterDownError, errors.TryAgainError)):
                            last = reply
                            continue
                        raise refusal(node.config, errors, reply) from None
                    if self._apply_map(reply, address):
                        self._epoch += 1
                        return
                if time.monotonic() + pause > deadline:
                    raise self._gave_up(last, retry_for)
                await asyncio.sleep(pause * (0.5 + random.random() / 2))
                pause = min(_MAX_PAUSE, pause * 2)

    def slot_failovers(self, key: str) -> int:
        """How many times this client saw a replica take over the slot of ``key`` (see the backend's heartbeat).

        A promoted replica may lack the last writes its master acknowledged
        (replication is asynchronous), so claims the store still shows may be
        ones a worker already finished: the backend releases them.
        """
        return self._failovers[self.slot_of(key)]

    def _apply_map(self, reply: Any, asked: tuple[str, int]) -> bool:
        """Take ``CLUSTER SLOTS``' reply as the map; False when it names no master."""
        slots: list[tuple[str, int] | None] = [None] * SLOTS
        masters: list[tuple[str, int]] = []
        for entry in reply:
            start, end, master = int(entry[0]), int(entry[1]), entry[2]
            host = master[0] if isinstance(master[0], str) and master[0] not in ("", "?") else asked[0]
            address = (host, int(master[1]))
            if address not in masters:
                masters.append(address)
            for slot in range(start, end + 1):
                slots[slot] = address
        if not masters:
            return False
        # A slot now served by a node that served no slot before was taken over by a replica (a
        # failover); one that moved to another master was resharded (MIGRATE copies keys whole).
        # CLUSTER SLOTS lists a replica only once its master gossiped a replication offset, so
        # replicas are told by this rather than by that list. A slot moved to a brand-new master
        # counts as a failover too: its claims are given back and run again, nothing is lost.
        before_masters = {address for address in self._owners if address is not None}
        for slot, (before, after) in enumerate(zip(self._owners, slots)):
            if before is not None and after is not None and before != after and after not in before_masters:
                self._failovers[slot] += 1
        # Slots no master serves (a cluster answering CLUSTERDOWN) keep their last known owner.
        self._owners = [after or before for before, after in zip(self._owners, slots)]
        self._slots, self._masters = slots, masters
        return True
