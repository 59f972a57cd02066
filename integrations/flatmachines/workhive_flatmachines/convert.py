"""Translations between flatmachines' vocabulary and workhive's: times, statuses, options, ids.

flatmachines keeps times as ISO-8601 strings in UTC and worker statuses as
free strings ("active", "terminating", "terminated", "lost"); workhive keeps
seconds since the epoch on the backend's clock and a closed set of statuses.

>>> iso(0.0)
'1970-01-01T00:00:00+00:00'
>>> workhive_status("terminating")
<WorkerStatus.STOPPING: 'stopping'>
>>> flatmachines_status(WorkerStatus.BUSY)
'active'
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from workhive.errors import InvalidArgument
from workhive.ids import RECEIPT_PATTERN, is_item_id
from workhive.models import WorkerStatus

__all__ = [
    "ACTIVE_STATUSES",
    "FLATMACHINES_STATUSES",
    "flatmachines_status",
    "iso",
    "missing_item",
    "push_options",
    "statuses_for_filter",
    "workhive_status",
]

#: flatmachines' status strings (distributed.WorkerRecord) and what each means in workhive
FLATMACHINES_STATUSES: dict[str, WorkerStatus] = {
    "active": WorkerStatus.IDLE,
    "terminating": WorkerStatus.STOPPING,
    "terminated": WorkerStatus.STOPPED,
    "lost": WorkerStatus.LOST,
}

#: the workhive statuses a flatmachines reader sees as "active" (registered, not on its way out)
ACTIVE_STATUSES = frozenset({WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.PAUSED})

_TO_FLATMACHINES = {
    **{status: "active" for status in ACTIVE_STATUSES},
    WorkerStatus.STOPPING: "terminating",
    WorkerStatus.STOPPED: "terminated",
    WorkerStatus.LOST: "lost",
}

#: push options: flatmachines' own (max_retries) and the workhive ones it may now use
PUSH_OPTIONS = ("max_retries", "max_attempts", "priority", "delay", "dedup_key")


def iso(seconds: float | None) -> str | None:
    """A backend time as flatmachines writes times (ISO-8601, UTC)."""
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc).isoformat()


def _accepted() -> str:
    names = [*FLATMACHINES_STATUSES, *(s.value for s in WorkerStatus if s.value not in FLATMACHINES_STATUSES)]
    return ", ".join(repr(n) for n in names)


def workhive_status(status: object) -> WorkerStatus:
    """The workhive status for a flatmachines status string (workhive's own names are accepted too)."""
    if isinstance(status, str):
        mapped = FLATMACHINES_STATUSES.get(status)
        if mapped is not None:
            return mapped
        try:
            return WorkerStatus(status)
        except ValueError:
            pass
    raise InvalidArgument(
        f"unknown worker status {status!r}: use one of {_accepted()} (flatmachines stored any string; "
        "workhive keeps a fixed set so that reapers and dashboards agree on what each means)",
        value=status,
    )


def flatmachines_status(status: WorkerStatus) -> str:
    """What a flatmachines reader sees for a workhive status."""
    return _TO_FLATMACHINES[status]


def statuses_for_filter(status: str) -> frozenset[WorkerStatus]:
    """The workhive statuses a flatmachines ``WorkerFilter(status=...)`` selects."""
    mapped = workhive_status(status)
    if mapped in ACTIVE_STATUSES and status == "active":
        return ACTIVE_STATUSES
    return frozenset({mapped})


def push_options(options: Mapping[str, Any] | None, default_attempts: int) -> dict[str, Any]:
    """``Pool.push`` keywords for flatmachines' push ``options``; unknown keys are refused, not ignored."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(PUSH_OPTIONS))
    if unknown:
        raise InvalidArgument(
            f"unknown push option(s) {', '.join(map(repr, unknown))}: use {', '.join(PUSH_OPTIONS)} "
            "(flatmachines ignored unknown options; a misspelt one would silently do nothing)",
            value=unknown,
        )
    if "max_retries" in opts and "max_attempts" in opts:
        raise InvalidArgument("give max_retries or max_attempts, not both: they are the same setting")
    attempts = opts.pop("max_retries", opts.pop("max_attempts", default_attempts))
    if attempts.__class__ is not int or attempts < 0:
        raise InvalidArgument(f"max_retries must be an int >= 0, got {attempts!r}", value=attempts)
    # flatmachines poisons on the first fail when max_retries is 0, as workhive does with one attempt.
    opts["max_attempts"] = max(1, attempts)
    return opts


def missing_item(value: object, pool: str) -> KeyError:
    """flatmachines' error for an id this pool cannot act on, saying why."""
    if isinstance(value, str) and (is_item_id(value) or RECEIPT_PATTERN.fullmatch(value)):
        why = "no such item in this pool (another pool's claim, or purged)"
    else:
        why = (
            "not an id this adapter issued (ids look like 'i000000000000002a'); ids from a "
            "flatmachines database are not valid here: move its items with `workhive import flatmachines`"
        )
    return KeyError(f"Work item {value!r} not found in pool {pool!r}: {why}")
