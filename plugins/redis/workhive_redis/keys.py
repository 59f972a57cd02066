"""Key names: every key of a pool under one hash tag, the hive-wide ones under another.

With prefix ``workhive``::

    {workhive}:version           the store's schema version and owner (hash)
    {workhive}:pools             pool name -> pool number (ids are unique across pools)
    {workhive}:w:<worker>        a worker's record; workers, beats, reaping: the registry
    {workhive}:wp:<worker>       the pools a worker has claimed from (heartbeat and reap visit them)
    {workhive}:s:<ns>, sx:<ns>   shared state: values and expiry times
    {workhive}:lock:<sha256>     a fleet-wide lock; lock-token, locks: its counter and index
    {workhive/<pool>}:ready      claim order; delayed, leases, done, dead, dedup, seq, n, tokens
    {workhive/<pool>}:i:<id>     an item (hash)
    {workhive/<pool>}:held:<w>   the items a worker holds in the pool

Redis Cluster hashes only the part in braces, so a pool's keys share a slot
and every pool script touches one slot; the hive-wide keys share another.
Names never contain braces (pool, worker and namespace names are checked by
the core; the prefix by ``url.py``), so no name can move a key to another slot.
"""

from __future__ import annotations

__all__ = ["HiveKeys", "PoolKeys"]


class PoolKeys:
    """The keys of one pool."""

    __slots__ = ("base", "dead", "dedup", "delayed", "done", "leases", "n", "ready", "seq", "wake")

    def __init__(self, prefix: str, pool: str) -> None:
        base = self.base = f"{{{prefix}/{pool}}}:"
        self.ready = base + "ready"
        self.delayed = base + "delayed"
        self.leases = base + "leases"
        self.done = base + "done"
        self.dead = base + "dead"
        self.dedup = base + "dedup"
        self.seq = base + "seq"
        self.n = base + "n"
        self.wake = base + "wake"  # a pub/sub channel, not a key

    def item(self, item_id: str) -> str:
        return f"{self.base}i:{item_id}"

    def held(self, worker_id: str) -> str:
        return f"{self.base}held:{worker_id}"


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
