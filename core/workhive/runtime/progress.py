"""Progress of a fleet run: the ``FleetProgress`` snapshot and two renderers.

The supervisor calls ``on_progress(FleetProgress(...))`` about once a second
(and once more at the end with ``final=True``). ``workhive work`` renders it;
``renderer_for("auto")`` gives the built-in choice: a live one-line display on
a terminal, plain log lines every few seconds otherwise.

>>> p = FleetProgress(pool="jobs", elapsed=10.0, done=50, failed=1, poisoned=0, released=2, rate=5.0,
...                   eta=20.0, pending=100, delayed=0, claimed=4, processes=2, workers=2)
>>> format_line(p)
'jobs: 50 done, 1 retried, 0 poisoned, 104 left | 5.0/s, ETA 20s | 2 procs | 10s'
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Literal

import attrs

from workhive.terminal import human

__all__ = ["FleetProgress", "format_line", "renderer_for", "LogRenderer", "LineRenderer"]

log = logging.getLogger("workhive.runtime.progress")


@attrs.frozen
class FleetProgress:
    """A snapshot of a running fleet.

    ``done``/``poisoned`` are the pool's progress since the run began and
    ``pending``/``delayed``/``claimed`` what it has left, all from one storage
    snapshot (so they add up); ``failed``/``released`` are this fleet's counts.
    ``last_errors`` maps the last few failing items to their last error.
    ``rate`` is items finished per second over the last few seconds; ``eta``
    is seconds until the pool's remaining items are through at that rate
    (None when unknown). ``rate_limited`` maps credential names to 429s seen,
    ``disabled`` disabled credential names to the reason.
    """

    pool: str
    elapsed: float
    done: int
    failed: int
    poisoned: int
    released: int
    rate: float
    eta: float | None
    pending: int
    delayed: int
    claimed: int
    processes: int
    workers: int
    rate_limited: dict[str, int] = attrs.field(factory=dict)
    disabled: dict[str, str] = attrs.field(factory=dict)
    last_errors: dict[str, str] = attrs.field(factory=dict)  # item id -> its last error, most recent last
    final: bool = False
    budget_waits: int = 0  # calls that waited for their key's rate budget (instead of calling into a 429)
    budget_wait_seconds: float = 0.0

    @property
    def remaining(self) -> int:
        return self.pending + self.delayed + self.claimed


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_line(p: FleetProgress) -> str:
    """One line: counts, rate, ETA, 429s per credential, processes, elapsed time, the last error.

    Secrets are scrubbed and control characters escaped (``workhive.terminal.human``): the
    line goes to a terminal, and quotes what a handler raised.
    """
    parts = [f"{p.pool}: {p.done} done, {p.failed} retried, {p.poisoned} poisoned, {p.remaining} left"]
    speed = f"{p.rate:.1f}/s"
    if p.eta is not None and p.remaining:
        speed += f", ETA {_duration(p.eta)}"
    parts.append(speed)
    if p.rate_limited:
        parts.append("429s " + " ".join(f"{k}={v}" for k, v in sorted(p.rate_limited.items())))
    if p.budget_waits:
        parts.append(f"budget waits {p.budget_waits} ({p.budget_wait_seconds / p.budget_waits:.2f}s avg)")
    if p.disabled:
        parts.append("disabled " + ",".join(sorted(p.disabled)))
    parts.append(f"{p.processes} procs")
    parts.append(_duration(p.elapsed))
    if p.last_errors:
        item_id, error = list(p.last_errors.items())[-1]
        # One line, whatever the handler raised: whitespace runs become one space, and control
        # characters (an escape sequence quoted from an API body) are shown as escapes, before the cut.
        error = human(" ".join(error.split()), one_line=True)
        parts.append(f"last error {item_id}: {error if len(error) <= 100 else error[:99] + '…'}")
    return human(" | ".join(parts), one_line=True)


class LogRenderer:
    """Plain log lines (``logging`` at INFO, or a stream), at most one per ``interval`` seconds."""

    def __init__(self, stream: IO[str] | None = None, interval: float = 5.0) -> None:
        self.stream = stream
        self.interval = interval
        self._last = float("-inf")

    def __call__(self, progress: FleetProgress) -> None:
        now = time.monotonic()
        if not progress.final and now - self._last < self.interval:
            return
        self._last = now
        line = format_line(progress)
        if self.stream is None:
            log.info("%s", line)
        else:
            print(line, file=self.stream, flush=True)


class LineRenderer:
    """A live line on a terminal, redrawn in place; the final state stays on screen."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._width = 0

    def __call__(self, progress: FleetProgress) -> None:
        line = format_line(progress)
        pad = max(0, self._width - len(line))
        self._width = len(line)
        end = "\n" if progress.final else ""
        self.stream.write("\r" + line + " " * pad + end)
        self.stream.flush()


def renderer_for(
    mode: Literal["auto", "bar", "log", "none"], stream: IO[str] | None = None
) -> Callable[[FleetProgress], None] | None:
    """The built-in renderer for ``FleetOptions.progress``: "bar" (live line), "log", "auto", or None for "none"."""
    out = stream if stream is not None else sys.stderr
    if mode == "none":
        return None
    if mode == "bar" or (mode == "auto" and out.isatty()):
        return LineRenderer(out)
    return LogRenderer(out)
