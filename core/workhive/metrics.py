"""Prometheus metrics for a whole fleet: event hooks count, the supervisor samples storage and serves them.

Every worker process of a fleet writes its counters into a shared directory
(prometheus-client's multiprocess mode), and the supervisor serves the sum
over all of them on ``--metrics-port``, together with what it samples from
storage (pool depth by state, oldest pending age, workers by status). Names
and labels follow Prometheus conventions; labels carry pool and credential
*names* only, never a secret.

Needs ``prometheus-client`` (``pip install 'workhive[metrics]'``); it is
imported only when metrics are switched on.

>>> import workhive.metrics as m  # doctest: +SKIP
>>> m.enable("/tmp/fleet-metrics")          # before any worker process starts
>>> manager = PluginManager(extra=[("metrics", m.MetricsPlugin())])  # every process that works items
>>> m.serve(9464)                           # in the supervisor
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workhive.errors import ConfigError
from workhive.hookspecs import hookimpl

if TYPE_CHECKING:
    from workhive.hive import Hive
    from workhive.models import ReapedWorker, WorkItem

__all__ = [
    "ENV",
    "MetricsPlugin",
    "enable",
    "mark_process_dead",
    "observe_admissible",
    "observe_credential",
    "observe_handler",
    "observe_released",
    "sample",
    "serve",
]

#: prometheus-client reads its multiprocess directory from this variable, in every process
ENV = "PROMETHEUS_MULTIPROC_DIR"

# Handler runs of LLM agents span milliseconds to many minutes.
_DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))

_metrics: dict[str, Any] = {}


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigError(
            "metrics need prometheus-client: pip install 'workhive[metrics]' (or prometheus-client)"
        ) from None
    return prometheus_client


def enable(directory: str | os.PathLike[str]) -> Path:
    """Point this process and the worker processes it starts at ``directory`` for metrics (emptied first).

    Call it in the supervisor before starting workers, and before anything imports
    prometheus_client: the client decides at import whether it runs multiprocess.
    """
    path = Path(directory)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    os.environ[ENV] = str(path)
    return path


def _get() -> dict[str, Any]:
    """The metric objects, made once per process."""
    if not _metrics:
        pc = _client()
        pool = ["pool"]
        _metrics.update(
            claimed=pc.Counter("workhive_items_claimed", "Claims taken (each counts an attempt).", pool),
            completed=pc.Counter("workhive_items_completed", "Items completed.", pool),
            failed=pc.Counter("workhive_items_failed", "Failures that were scheduled for a retry.", pool),
            poisoned=pc.Counter("workhive_items_poisoned", "Items poisoned (dead-lettered).", pool),
            released=pc.Counter("workhive_items_released", "Claims given back without spending the attempt.", pool),
            lost=pc.Counter("workhive_workers_lost", "Workers declared lost by a reaper.", []),
            in_flight=pc.Gauge(
                "workhive_claims_in_flight", "Claims held by workers right now.", pool, multiprocess_mode="livesum"
            ),
            handler=pc.Histogram(
                "workhive_handler_seconds", "Time a handler ran for one item.", pool, buckets=_DURATION_BUCKETS
            ),
            wait=pc.Histogram(
                "workhive_queue_wait_seconds",
                "Time from an item becoming available to its claim.",
                pool,
                buckets=_DURATION_BUCKETS,
            ),
            calls=pc.Counter(
                "workhive_credential_calls", "Calls made with a credential, by outcome.", ["credential", "outcome"]
            ),
            cred_state=pc.Gauge(
                "workhive_credential_state",
                "1 for the state a credential is in (available, cooling, parked, disabled).",
                ["credential", "state"],
                multiprocess_mode="mostrecent",
            ),
            cooldown=pc.Gauge(
                "workhive_credential_cooldown_seconds",
                "Seconds until a cooling or parked credential is usable again.",
                ["credential"],
                multiprocess_mode="mostrecent",
            ),
            depth=pc.Gauge(
                "workhive_pool_items", "Items in a pool by state.", ["pool", "state"], multiprocess_mode="mostrecent"
            ),
            oldest=pc.Gauge(
                "workhive_pool_oldest_pending_age_seconds",
                "Age of the longest-waiting ready item.",
                pool,
                multiprocess_mode="mostrecent",
            ),
            workers=pc.Gauge(
                "workhive_workers", "Registered workers by health.", ["health"], multiprocess_mode="mostrecent"
            ),
            admissible=pc.Gauge(
                "workhive_admissible_items",
                "Ready items the credentials' rate budgets let through in the next minute (all ready items "
                "without budgets): what an external autoscaler scales on.",
                pool,
                multiprocess_mode="mostrecent",
            ),
        )
    return _metrics


def _claim_time(item: WorkItem) -> float | None:
    if item.lease_expires_at is None or item.lease_seconds is None:
        return None
    return item.lease_expires_at - item.lease_seconds


class MetricsPlugin:
    """Event hooks that count a process's claims, completions, failures and losses.

    >>> manager = PluginManager(extra=[("metrics", MetricsPlugin())])  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.m = _get()

    @hookimpl
    def workhive_item_claimed(self, pool: str, item: WorkItem, worker_id: str) -> None:
        self.m["claimed"].labels(pool).inc()
        self.m["in_flight"].labels(pool).inc()
        claimed_at = _claim_time(item)
        if claimed_at is not None:
            self.m["wait"].labels(pool).observe(max(0.0, claimed_at - item.available_at))

    @hookimpl
    def workhive_item_completed(self, pool: str, item: WorkItem) -> None:
        self.m["completed"].labels(pool).inc()
        self.m["in_flight"].labels(pool).dec()

    @hookimpl
    def workhive_item_failed(self, pool: str, item: WorkItem, error: str, retry_in: float) -> None:
        self.m["failed"].labels(pool).inc()
        self.m["in_flight"].labels(pool).dec()

    @hookimpl
    def workhive_item_poisoned(self, pool: str, item: WorkItem, error: str) -> None:
        self.m["poisoned"].labels(pool).inc()
        self.m["in_flight"].labels(pool).dec()

    @hookimpl
    def workhive_worker_lost(self, worker: ReapedWorker) -> None:
        self.m["lost"].inc()


def observe_handler(pool: str, seconds: float) -> None:
    """Record one handler run (the worker loop calls it when metrics are on)."""
    _get()["handler"].labels(pool).observe(seconds)


def observe_released(pool: str) -> None:
    """Record a claim given back (shutdown, rate limit) and no longer in flight."""
    m = _get()
    m["released"].labels(pool).inc()
    m["in_flight"].labels(pool).dec()


_STATES = ("available", "cooling", "parked", "disabled")


def observe_credential(name: str, outcome: str | None, state: str, until: float | None) -> None:
    """Record a call's outcome with credential ``name`` (by name: never the key) and the state it left."""
    m = _get()
    if outcome is not None:
        m["calls"].labels(name, outcome).inc()
    for s in _STATES:
        m["cred_state"].labels(name, s).set(1 if s == state else 0)
    m["cooldown"].labels(name).set(max(0.0, until - time.time()) if until is not None else 0.0)


def observe_admissible(pool: str, items: int) -> None:
    """Set ``workhive_admissible_items`` (``workhive.autoscale.admissible_items``; the supervisor samples it)."""
    _get()["admissible"].labels(pool).set(items)


def mark_process_dead(pid: int) -> None:
    """A worker process ended: drop its live gauges (claims in flight) from the fleet's sums."""
    if os.environ.get(ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


async def sample(hive: Hive, pools: list[str] | None = None) -> None:
    """Set the storage gauges (depth by state, oldest pending age, workers by health) from ``hive``."""
    from workhive.models import WorkerStatus

    m = _get()
    now = await hive.now()
    for name in pools if pools is not None else await hive.pools():
        stats = await hive.pool(name).stats()
        for state in ("pending", "delayed", "claimed", "done", "poisoned", "cancelled"):
            m["depth"].labels(name, state).set(getattr(stats, state))
        oldest = 0.0 if stats.oldest_pending_at is None else max(0.0, now - stats.oldest_pending_at)
        m["oldest"].labels(name).set(oldest)
    counts = {"active": 0, "stale": 0, "lost": 0, "stopped": 0}
    for record in await hive.workers.list():
        if record.status in (WorkerStatus.LOST, WorkerStatus.STOPPED):
            counts[record.status.value] += 1
        else:
            counts["stale" if now - record.last_heartbeat >= hive.reap_after else "active"] += 1
    for health, count in counts.items():
        m["workers"].labels(health).set(count)


def serve(port: int, host: str = "127.0.0.1") -> Any:
    """Serve the fleet's metrics (summed over every process writing to the directory) on ``host:port``.

    Returns the server; ``ConfigError`` when the port is taken.
    """
    pc = _client()
    from prometheus_client import multiprocess

    registry = pc.CollectorRegistry()
    if os.environ.get(ENV):
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = pc.REGISTRY
    try:
        server, _thread = pc.start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror}; pick another --metrics-port"
        ) from None
    return server
