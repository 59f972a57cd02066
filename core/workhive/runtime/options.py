"""What ``workhive work`` is asked to do (``FleetOptions``) and what happened (``FleetReport``).

This is the seam between the CLI/config layer, which builds options from
flags, ``WORKHIVE_*`` variables and ``workhive.toml``, and the fleet runtime,
which runs them.
"""

from __future__ import annotations

import os
from typing import Literal

import attrs

from workhive.hive import DEFAULT_STORAGE

__all__ = ["FleetOptions", "FleetReport", "ExitCode", "MAX_PROCESSES", "MAX_CONCURRENCY"]

#: upper bounds a fleet needs ``allow_large_fleet`` (``--allow-large-fleet``) to pass, so that a
#: typo (100000 for 1000) cannot take the machine down. Each process costs tens of MB. An item in
#: flight costs a few KB of the worker's own (docs/runtime.md, bench/waiting.py) plus what its
#: handler holds, and a descriptor while its handler has a connection open: a process raises its
#: soft descriptor limit to fit ``concurrency`` and says so when the hard limit is lower. 20,000
#: waiting items is ~100 MB of runtime state and ~20,000 sockets, where both start to run out.
MAX_PROCESSES = 256
MAX_CONCURRENCY = 20_000


class ExitCode:
    """Exit statuses of ``workhive work`` (and of ``run_fleet``'s report)."""

    DRAINED = 0  # --until-empty: the pool drained (poisoned items are reported, not a failure)
    STOPPED = 0  # stopped by SIGTERM/SIGINT after a clean drain of in-flight work
    FAILURE = 1  # workers kept dying / could not start
    CONFIG = 2  # bad handler, plugin, URL or option
    INTERRUPTED = 130  # second signal: exited at once, leases left to expire


@attrs.frozen
class FleetOptions:
    """Everything a fleet run needs; every field has the documented default."""

    pool: str
    handler: str  # "package.module:function"
    storage: str = DEFAULT_STORAGE
    locks: str | None = None
    backoff: str = "full-jitter"
    credentials: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    processes: int = attrs.field(factory=lambda: os.cpu_count() or 1)
    min_processes: int | None = None  # None: = processes (no scaling)
    max_processes: int | None = None
    concurrency: int = 1  # items in flight per process (one worker, one registry row per process)
    batch: int = 1  # items claimed per claim call
    lease: float = 60.0
    heartbeat: float = 10.0
    max_attempts: int = 5  # caps the attempts of every item this fleet claims (and the hive's default for pushes)
    reap_after: float = 60.0
    until_empty: bool = False
    grace: float = 30.0  # seconds in-flight items get to finish after SIGTERM
    max_rate_limit_retries: int = 50  # releases without spending an attempt, per item
    progress: Literal["auto", "bar", "log", "none"] = "auto"
    no_plugins: bool = False
    allow_large_fleet: bool = False  # lift MAX_PROCESSES / MAX_CONCURRENCY, knowingly
    metrics_port: int | None = None  # serve Prometheus metrics for the whole fleet here (127.0.0.1)
    # rate budgets (workhive.budgets): tokens a call is estimated at when the handler gives no
    # estimate_tokens; the longest a worker waits for a key's budget; learn limits not given
    token_estimate: float = 0.0
    budget_wait: float = 30.0
    learn_limits: bool = False
    # seconds a handler may run on one item (None: no limit): past it an async handler's task is
    # cancelled, a sync one sees ctx.cancelled and gets ``grace`` seconds to return before its
    # process is replaced; the item fails "timed out after N s" (retried or poisoned by attempts)
    timeout: float | None = None
    # how worker processes start (workhive.runtime.forked): "auto" forks them from the supervisor
    # when that is safe (one thread, Linux), "spawn" always runs a fresh `python -m workhive.runtime`,
    # "fork" always forks
    start_method: Literal["auto", "fork", "spawn"] = "auto"


@attrs.frozen
class FleetReport:
    """What a fleet run did, for the CLI's summary and ``--json``."""

    pool: str
    done: int
    failed: int  # failures that were retried
    poisoned: int
    released: int  # items given back without spending an attempt (rate limits, shutdown)
    rate_limited: dict[str, int]  # credential name -> 429s seen
    disabled_credentials: dict[str, str]  # credential name -> reason
    workers_started: int
    workers_lost: int
    elapsed: float
    exit_code: int
    reason: str
    budget_waits: int = 0  # calls that waited for their key's rate budget (workhive.budgets)
    processes_replaced: int = 0  # worker processes that died, or could not be started, and were replaced
    cancelled: int = 0  # items cancelled (Pool.cancel) while a worker of this fleet ran them
