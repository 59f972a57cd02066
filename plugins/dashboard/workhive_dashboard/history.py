"""What the dashboard's charts show: samples of the hive over the last hour, kept in memory by the server.

``History.sample(hive)`` reads every pool's statistics and the fleet's shared
counts (``workhive.runtime.counts``: retried failures per pool; calls, 429s
and rate per credential name) and keeps them in a ring of ``window``
seconds. ``History.series()`` turns consecutive samples into the charted
series, aligned on one time axis (``None`` where a pool or key had no
sample):

* per pool and for the whole hive: done/s, failed/s (poisoned plus failures
  put back for a retry), queue depth (pending + delayed), oldest pending age;
* per credential: calls/s, 429s/s, budget use (calls per minute over the
  key's rate per minute, in %, when the key is budgeted).

The app samples every ``interval`` seconds from a background task while it
runs, so the charts hold the last hour whether or not a page was open.

>>> history = History(window=3600.0)
>>> await history.sample(hive)  # doctest: +SKIP
>>> history.series()["pools"]["jobs"]["done_per_s"][-1]  # doctest: +SKIP
12.5
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable
from typing import Any

import attrs

from workhive.hive import Hive
from workhive.runtime.counts import read_counts

__all__ = ["History", "Sample"]

WINDOW = 3600.0
_POOL_SERIES = ("done_per_s", "failed_per_s", "depth", "oldest_pending_age")
_KEY_SERIES = ("calls_per_s", "rate_limited_per_s", "budget_use")


@attrs.frozen
class Sample:
    """One look at the hive: per pool (done, poisoned, failed, depth, oldest age), per key (calls, 429s, rpm)."""

    at: float
    pools: dict[str, tuple[int, int, int, int, float | None]]
    credentials: dict[str, tuple[int, int, float | None]]


def _rate(now: int, before: int, seconds: float) -> float:
    # Counts only grow, except when items are purged or a process's counts expire: never chart a negative rate.
    return max(0, now - before) / seconds


class History:
    """A ring of samples over the last ``window`` seconds (``clock``: wall time, for the charts' axis)."""

    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.time) -> None:
        self.window = window
        self._clock = clock
        self._samples: collections.deque[Sample] = collections.deque()

    def __len__(self) -> int:
        return len(self._samples)

    async def sample(self, hive: Hive) -> Sample:
        """Read the hive once and keep the sample (dropping those older than the window)."""
        hive_now = await hive.now()
        counts = await read_counts(hive)
        pools = {}
        for name in sorted(await hive.pools()):
            stats = await hive.pool(name).stats()
            oldest = None if stats.oldest_pending_at is None else max(0.0, hive_now - stats.oldest_pending_at)
            failed = counts["failed"].get(name, 0)
            pools[name] = (stats.done, stats.poisoned, failed, stats.pending + stats.delayed, oldest)
        keys = {n: (c["calls"], c["rate_limited"], c["rpm"]) for n, c in sorted(counts["credentials"].items())}
        return self.add(Sample(self._clock(), pools, keys))

    def add(self, sample: Sample) -> Sample:
        """Keep ``sample`` (for ``sample`` and tests that build samples by hand)."""
        self._samples.append(sample)
        while self._samples and self._samples[0].at < sample.at - self.window:
            self._samples.popleft()
        return sample

    def series(self) -> dict[str, Any]:
        """The charted series, one value per sample after the first (rates need two samples)."""
        samples = list(self._samples)
        pairs = [(a, b) for a, b in itertools.pairwise(samples) if b.at > a.at]
        pool_names = sorted({name for s in samples for name in s.pools})
        key_names = sorted({name for s in samples for name in s.credentials})
        pools: dict[str, dict[str, list[float | None]]] = {n: {k: [] for k in _POOL_SERIES} for n in pool_names}
        whole: dict[str, list[float | None]] = {k: [] for k in _POOL_SERIES}
        keys: dict[str, dict[str, list[float | None]]] = {n: {k: [] for k in _KEY_SERIES} for n in key_names}
        for before, now in pairs:
            seconds = now.at - before.at
            totals: dict[str, float | None] = {"done_per_s": 0.0, "failed_per_s": 0.0, "depth": 0.0}
            oldest: float | None = None
            for name in pool_names:
                series = pools[name]
                if name not in now.pools:
                    for k in _POOL_SERIES:
                        series[k].append(None)
                    continue
                done, poisoned, failed, depth, age = now.pools[name]
                # A pool (or a process's counts) new since the last sample counted from nothing.
                p_done, p_poisoned, p_failed, _, _ = before.pools.get(name, (0, 0, 0, 0, None))
                values = {
                    "done_per_s": _rate(done, p_done, seconds),
                    "failed_per_s": _rate(poisoned, p_poisoned, seconds) + _rate(failed, p_failed, seconds),
                    "depth": float(depth),
                    "oldest_pending_age": age,
                }
                for k, v in values.items():
                    series[k].append(v)
                for k in ("done_per_s", "failed_per_s", "depth"):
                    totals[k] = (totals[k] or 0.0) + (values[k] or 0.0)
                if age is not None:
                    oldest = age if oldest is None else max(oldest, age)
            totals["oldest_pending_age"] = oldest
            for k in _POOL_SERIES:
                whole[k].append(totals[k])
            for name in key_names:
                series = keys[name]
                if name not in now.credentials:
                    for k in _KEY_SERIES:
                        series[k].append(None)
                    continue
                calls, limited, rpm = now.credentials[name]
                p_calls, p_limited, _ = before.credentials.get(name, (0, 0, None))
                per_second = _rate(calls, p_calls, seconds)
                series["calls_per_s"].append(per_second)
                series["rate_limited_per_s"].append(_rate(limited, p_limited, seconds))
                series["budget_use"].append(None if not rpm else round(100.0 * per_second * 60.0 / rpm, 2))
        return {
            "t": [round(b.at, 3) for _, b in pairs],
            "window": self.window,
            "hive": whole,
            "pools": pools,
            "credentials": keys,
        }
