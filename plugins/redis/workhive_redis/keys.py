"""Key names: every key of a pool under one hash tag, the hive-wide ones under another.

With prefix ``workhive``::

    {workhive}:version           the store's schema version and owner (hash)
    {workhive}:pools             pool name -> pool number (ids are unique across pools)
    {workhive}:w:<worker>        a worker's record; workers, beats, reaping: the registry
    {workhive}:wp:<worker>       the pools a worker has claimed from (heartbeat and reap visit them)
    {workhive}:s:<ns>, sx:<ns>   shared state: values and expiry times
    {workhive}:lock:<sha256>     a fleet-wide lock; lock-token, locks: its counter and index
    {workhive}:schedules         schedule name -> its definition (JSON; workhive_redis.schedules)
    {workhive/<pool>}:ready      claim order; delayed, leases, done, dead, cancelled, dedup, seq, n, tokens
    {workhive/<pool>}:ticks      schedule (name@created_at) -> the latest tick it fired into the pool
    {workhive/<pool>}:i:<id>     an item (hash)
    {workhive/<pool>}:held:<w>   the items a worker holds in the pool
    {workhive/<pool>}:steps:<id> an item's durable steps (hash: step key -> STEP_RECORD; goes with the item)
    {workhive/<pool>}:g:<group>  a group's settings and turn (GROUP_FIELDS); gpool: the pool's (GROUP_POOL_FIELDS)
    {workhive/<pool>}:gr:<group> its ready items; gl:<group> its claims; gq:<p>, gqp, gready, gpaused,
                                 gfull, gpl, gwait, gknown: the turn index and counts (lua/includes/groups.lua)

Redis Cluster hashes only the part in braces, so a pool's keys share a slot
and every pool script touches one slot; the hive-wide keys share another.
Names never contain braces (pool, worker and namespace names are checked by
the core; the prefix by ``url.py``), so no name can move a key to another slot.
"""

from __future__ import annotations

__all__ = [
    "GROUP_FIELDS",
    "GROUP_POOL_FIELDS",
    "ITEM_FIELDS",
    "LOCK_FIELDS",
    "STEP_RECORD",
    "VERSION_FIELDS",
    "WORKER_FIELDS",
    "HiveKeys",
    "PoolKeys",
]

#: an item's hash, ``{prefix/pool}:i:<id>``: field -> the ``WorkItem`` attribute it holds
ITEM_FIELDS = {
    "p": "payload (JSON text)",
    "st": "state: pending, claimed, done, poisoned or cancelled",
    "pr": "priority",
    "at": "attempts (claims so far, minus releases)",
    "ma": "max_attempts",
    "tk": "token: the fencing token of the latest claim (0 before the first)",
    "ca": "created_at (server seconds)",
    "aa": "available_at: when it may be claimed (server seconds)",
    "cb": "claimed_by: the worker id holding it (only while claimed)",
    "le": "lease_expires_at (only while claimed)",
    "ls": "lease_seconds: the lease length extensions renew (only while claimed)",
    "dk": "dedup_key (absent when none)",
    "er": "error: the last failure's text",
    "rs": "result (JSON text, once done)",
    "fa": "finished_at: when it became done, poisoned or cancelled",
    "rl": "releases: claims given back without spending an attempt",
    "gr": "group: the group (tenant) it belongs to (absent when ungrouped)",
}

#: a group's hash, ``{prefix/pool}:g:<group>`` (lua/includes/groups.lua): field -> what it holds
GROUP_FIELDS = {
    "w": "weight: its share of claims while backlogged (absent: 1)",
    "l": "limit: its own cap on unexpired claims (absent: the pool's default, if any)",
    "pu": "paused_until: claims skip it until then (server seconds)",
    "vt": "virtual time: the turn order (smallest first); a claim adds 1/weight",
    "ix": "the priority at which it sits in the turn index (absent: not in it)",
    "pk": "parked out of the index: 'p' paused (gpaused), 'l' at its limit (gfull)",
}

#: the pool's groups hash, ``{prefix/pool}:gpool``: field -> what it holds (the pool limit is the key ``gpl``)
GROUP_POOL_FIELDS = {
    "vt": "the pool's virtual time: the vt of the latest group served",
    "uvt": "the ungrouped items' virtual time (they take turns as one group of weight 1)",
    "dl": "default limit of every named group without its own",
}

#: a durable step's value in ``{prefix/pool}:steps:<id>`` (step_put-2.lua): its parts, tab-separated, in order
STEP_RECORD = (
    "n: the step's place in the item's store order (1, 2, ...)",
    "failed: 1 if the step raised Permanent (the result is then its error text), else 0",
    "token: the fencing token of the claim that stored it",
    "stored_at (server seconds)",
    "result (JSON text, last and whole: JSON never holds a raw tab)",
)

#: a worker's record, ``{prefix}:w:<worker>``: field -> the ``WorkerRecord`` attribute it holds
WORKER_FIELDS = {
    "host": "host",
    "pid": "pid",
    "pools": "pools (JSON list)",
    "caps": "capabilities (JSON list)",
    "st": "status (a WorkerStatus value: starting, idle, busy, ..., lost)",
    "ra": "registered_at (server seconds)",
    "hb": "last_heartbeat (server seconds)",
    "dt": "detail (absent when none)",
}

#: a held lock, ``{prefix}:lock:<sha256>``: field -> the ``LockHolder`` attribute it holds
LOCK_FIELDS = {
    "o": "owner: a random id per acquisition (only it may release)",
    "n": "name (JSON text)",
    "t": "token (fencing)",
    "p": "pid",
    "h": "host",
    "w": "worker_id (JSON text)",
    "a": "acquired_at (server seconds)",
    "ttl": "ttl in seconds ('' = none)",
}

#: the version record, ``{prefix}:version`` (``workhive_redis.schema``)
VERSION_FIELDS = {
    "by": "owner: always 'workhive-redis'",
    "schema": "the layout version (schema.SCHEMA_VERSION)",
}


class PoolKeys:
    """The keys of one pool."""

    __slots__ = (
        "base",
        "cancelled",
        "dead",
        "dedup",
        "delayed",
        "done",
        "gready",
        "leases",
        "n",
        "ready",
        "seq",
        "ticks",
        "wake",
    )

    def __init__(self, prefix: str, pool: str) -> None:
        base = self.base = f"{{{prefix}/{pool}}}:"
        self.ready = base + "ready"
        self.delayed = base + "delayed"
        self.gready = base + "gready"  # every grouped ready item (lua/includes/groups.lua)
        self.leases = base + "leases"
        self.done = base + "done"
        self.dead = base + "dead"
        self.cancelled = base + "cancelled"  # cancelled items by finish time (Pool.cancel); scripts name it from base
        self.dedup = base + "dedup"
        self.seq = base + "seq"
        self.n = base + "n"
        self.ticks = base + "ticks"  # schedules' latest fired ticks (workhive_redis.schedules)
        self.wake = base + "wake"  # a pub/sub channel, not a key

    def item(self, item_id: str) -> str:
        return f"{self.base}i:{item_id}"

    def held(self, worker_id: str) -> str:
        return f"{self.base}held:{worker_id}"

    def steps(self, item_id: str) -> str:
        return f"{self.base}steps:{item_id}"


class HiveKeys:
    """The hive-wide keys."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        g = self.base = f"{{{prefix}}}:"
        self.version = g + "version"
        self.pools = g + "pools"
        self.poolseq = g + "poolseq"
        self.workers = g + "workers"
        self.wseq = g + "wseq"
        self.beats = g + "beats"
        self.reaping = g + "reaping"
        self.worker_prefix = g + "w:"
        self.lock_prefix = g + "lock:"
        self.lock_token = g + "lock-token"
        self.locks = g + "locks"
        self.lock_freed = g + "lock-freed"  # a pub/sub channel
        self.budgets = g + "budgets"  # rate budgets' theoretical arrival times (workhive.budgets)
        self.schedules = g + "schedules"  # schedule definitions (workhive_redis.schedules)
        #: glob patterns matching every key this prefix can own (for the foreign-keys check)
        self.patterns = (f"{{{prefix}}}*", f"{{{prefix}/*")

    def worker(self, worker_id: str) -> str:
        return self.worker_prefix + worker_id

    def worker_pools(self, worker_id: str) -> str:
        return f"{self.base}wp:{worker_id}"

    def state(self, namespace: str) -> tuple[str, str]:
        return f"{self.base}s:{namespace}", f"{self.base}sx:{namespace}"

    def lock(self, member: str) -> str:
        return self.lock_prefix + member
