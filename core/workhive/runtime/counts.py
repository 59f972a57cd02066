"""Counts each worker process shares through the hive, for the dashboard's charts.

Per process: failures put back for a retry (pool statistics count done and
poisoned items, not retries) and, per credential *name*, calls, 429s and the
key's rate (its known ``rpm`` or the rate the fleet learned). Written to the
shared-state namespace ``COUNTS_NAMESPACE`` under the process's own key at
most every ``PUBLISH_SECONDS`` (from the heartbeat loop) and once as the
process stops; a reader sums them over processes and takes differences over
time. Never a secret: keys are named, and the namespace holds numbers.

Writing never holds up the work: ``publish_soon`` starts the write as a task
of its own (a heartbeat or a settlement waits for no chart), and the last one,
as the process stops, is bounded by ``CLOSE_SECONDS``.

>>> counts = SharedCounts(hive, "jobs")  # doctest: +SKIP
>>> counts.call("OPENAI_API_KEY", rate_limited=False, rpm=500.0)
>>> counts.publish_soon()  # doctest: +SKIP
>>> await counts.close()  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["COUNTS_NAMESPACE", "SharedCounts", "read_counts"]

log = logging.getLogger("workhive.runtime.counts")

#: the shared-state namespace the counts live in
COUNTS_NAMESPACE = "workhive-counts"
#: a process's counts are kept this long after its last write (the dashboard charts an hour)
COUNTS_TTL = 2 * 3600.0
PUBLISH_SECONDS = 1.0
#: the last write, as the process stops, waits at most this long for storage
CLOSE_SECONDS = 2.0


class SharedCounts:
    """One worker process's running counts for ``pool``, shared through ``hive``."""

    def __init__(self, hive: Hive, pool: str) -> None:
        self._hive = hive
        self.key = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.pool = pool
        self.failed = 0
        self.credentials: dict[str, dict[str, Any]] = {}
        self._dirty = False
        self._published_at = -float("inf")
        self._writing: asyncio.Task[None] | None = None

    def retry(self) -> None:
        """A failure put back for a retry."""
        self.failed += 1
        self._dirty = True

    def call(self, name: str, *, rate_limited: bool, rpm: float | None) -> None:
        """A call made with credential ``name`` (its outcome known); ``rpm``: its rate now, if budgeted."""
        entry = self.credentials.setdefault(name, {"calls": 0, "rate_limited": 0, "rpm": None})
        entry["calls"] += 1
        entry["rate_limited"] += 1 if rate_limited else 0
        entry["rpm"] = None if rpm is None else round(rpm, 3)
        self._dirty = True

    def publish_soon(self) -> None:
        """Start writing the counts in a task of their own, if they changed and are due (none in flight)."""
        if not self._dirty or (self._writing is not None and not self._writing.done()):
            return
        if time.monotonic() - self._published_at < PUBLISH_SECONDS:
            return
        self._writing = asyncio.get_running_loop().create_task(self.publish())

    async def close(self) -> None:
        """The last write as the process stops, bounded by ``CLOSE_SECONDS`` (a dead store costs no more)."""
        with contextlib.suppress(asyncio.TimeoutError):
            if self._writing is not None and not self._writing.done():
                await asyncio.wait_for(asyncio.shield(self._writing), CLOSE_SECONDS)
            await asyncio.wait_for(self.publish(force=True), CLOSE_SECONDS)

    async def publish(self, *, force: bool = False) -> None:
        """Write the counts if they changed (at most every ``PUBLISH_SECONDS`` unless ``force``); never raises."""
        now = time.monotonic()
        if not self._dirty or (not force and now - self._published_at < PUBLISH_SECONDS):
            return
        self._dirty, self._published_at = False, now
        value = {"pool": self.pool, "failed": self.failed, "credentials": self.credentials}
        try:
            await self._hive.shared(COUNTS_NAMESPACE).put(self.key, value, ttl=COUNTS_TTL)
        except Exception as exc:  # the charts miss a beat; the work goes on
            self._dirty = True
            log.debug("sharing the process's counts failed: %s", exc)


async def read_counts(hive: Hive) -> dict[str, Any]:
    """The fleet's counts summed over its processes: failures per pool; calls, 429s and rate per credential.

    >>> await read_counts(hive)  # doctest: +SKIP
    {'failed': {'jobs': 3}, 'credentials': {'KEY_1': {'calls': 40, 'rate_limited': 2, 'rpm': 120.0}}}
    """
    failed: dict[str, int] = {}
    credentials: dict[str, dict[str, Any]] = {}
    for value in (await hive.shared(COUNTS_NAMESPACE).items()).values():
        if not isinstance(value, dict):
            continue
        pool = value.get("pool")
        if isinstance(pool, str) and isinstance(value.get("failed"), int):
            failed[pool] = failed.get(pool, 0) + value["failed"]
        for name, entry in (value.get("credentials") or {}).items():
            if not isinstance(entry, dict):
                continue
            total = credentials.setdefault(name, {"calls": 0, "rate_limited": 0, "rpm": None})
            total["calls"] += int(entry.get("calls") or 0)
            total["rate_limited"] += int(entry.get("rate_limited") or 0)
            if isinstance(entry.get("rpm"), (int, float)):
                # The fleet's processes share one rate per key: any of them says it.
                total["rpm"] = max(total["rpm"] or 0.0, float(entry["rpm"]))
    return {"failed": failed, "credentials": credentials}
