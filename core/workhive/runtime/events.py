"""Events a worker process reports to the supervisor, and their running tally.

Children write one JSON array per line to a pipe (one ``os.write`` each, well
under ``PIPE_BUF`` so lines from one writer never interleave), right after the
storage call they describe: the supervisor's counts are exact for every
process that exits normally. A process killed with SIGKILL can lose at most the
event of the call it was making when it died.

>>> tally = Tally()
>>> tally.apply(["done", 3]); tally.apply(["rate_limited", "key-1"])
>>> tally.done, tally.rate_limited
(3, {'key-1': 1})
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any, Protocol

import attrs

from workhive.redaction import scrub, scrub_data

__all__ = ["EventSink", "ListSink", "PipeSink", "Tally"]

# Event kinds (first element of each event):
DONE = "done"  # n items completed, then their ids
FAILED = "failed"  # n failures put back for a retry
POISONED = "poisoned"  # n items poisoned
RELEASED = "released"  # n items given back without spending an attempt
RATE_LIMITED = "rate_limited"  # credential name (or "-") hit a 429
DISABLED = "disabled"  # credential name, reason
WORKER = "worker"  # worker id registered
WORKER_LOST = "worker_lost"  # worker id was declared lost while running
START = "start"  # lane ("<worker id>#<n>"), item id, token, alone (1: nothing else runs beside it): a claim starts
#: worker id, then (lane number, item id, token) for each of several claims starting at once, none alone: the
#: claims one ``claim_many`` brought, announced in one write before any of their lanes runs (see Worker._start_lanes)
STARTS = "starts"
#: lane ("<worker id>#<n>"), batch number, offset, then item id, token for each of the items from ``offset`` on
#: of a batch the lane will run in that order, one after another, announced before it begins; which of them it
#: runs, the lane writes to its slot of the process's lane board instead of a START each (runtime.board). A
#: batch too long for one line comes in several, at increasing offsets
BATCH = "batch"
READY = "ready"  # the process loaded its handler and registered its workers
FATAL = "fatal"  # exit code, message[, STORAGE_FAULT]: the process cannot run (bad handler, storage down)
EXIT = "exit"  # exit code, reason, workers whose claims it could not give back: its last word before it exits
BUDGET_WAIT = "budget_wait"  # seconds a worker waited for its key's rate budget before a call
RAN_DRY = "ran_dry"  # worker id: a busy worker's claim found nothing (a hint that the pool may have drained)
CANCELLED = "cancelled"  # n items cancelled (Pool.cancel) while their handler ran here, then their ids

#: the kind a FATAL event may carry: the process stops because storage kept failing (no item is to blame)
STORAGE_FAULT = "storage"


class EventSink(Protocol):
    def __call__(self, *event: Any) -> None: ...


#: one encoder for every event: ``json.dumps`` with separators builds a new encoder per call, per item here
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str).encode
#: a string as ``_ENCODE`` writes it (ASCII, escaped)
_STRING = encode_basestring_ascii


class PipeSink:
    """Writes events as JSON lines to a pipe's write end (a child's side)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __call__(self, *event: Any) -> None:
        if len(event) == 5 and event[0] == START:
            # The one event written per item (a claim starting): formatted directly, the same line
            # the encoder writes, for a fifth of its cost.
            _, lane, item_id, token, alone = event
            if type(lane) is str and type(item_id) is str and type(token) is int and type(alone) is int:
                line = f'["start",{_STRING(scrub(lane))},{_STRING(scrub(item_id))},{token},{alone}]'
                if len(line) <= 3000:
                    self._write(line)
                    return
        event = scrub_data(event)  # reasons and messages may quote an API body that echoes a key
        line = _ENCODE(event)
        if len(line) > 3000:  # stay under PIPE_BUF so the write is atomic
            line = json.dumps([*event[:2], str(event[2:])[:2000]], separators=(",", ":"))
        self._write(line)

    def _write(self, line: str) -> None:
        try:
            os.write(self.fd, (line + "\n").encode())
        except OSError:  # the supervisor is gone; nobody is listening any more
            pass


class ListSink:
    """Collects events in a list (in-process runs and tests)."""

    def __init__(self, on_event: Callable[[list[Any]], None] | None = None) -> None:
        self.events: list[list[Any]] = []
        self._on_event = on_event

    def __call__(self, *event: Any) -> None:
        clean = scrub_data(list(event))
        self.events.append(clean)
        if self._on_event is not None:
            self._on_event(list(clean))


@attrs.define
class Tally:
    """Running counts over a fleet's events."""

    done: int = 0
    failed: int = 0
    poisoned: int = 0
    released: int = 0
    rate_limited: dict[str, int] = attrs.field(factory=dict)
    disabled: dict[str, str] = attrs.field(factory=dict)
    workers_started: int = 0
    workers_lost: int = 0
    budget_waits: int = 0  # calls that waited for rate budget
    budget_wait_seconds: float = 0.0
    cancelled: int = 0  # items cancelled while their handler ran (the handler stopped, nothing settled)

    def apply(self, event: list[Any]) -> None:
        kind = event[0]
        if kind == DONE:
            self.done += int(event[1])
        elif kind == FAILED:
            self.failed += int(event[1])
        elif kind == POISONED:
            self.poisoned += int(event[1])
        elif kind == RELEASED:
            self.released += int(event[1])
        elif kind == RATE_LIMITED:
            self.rate_limited[event[1]] = self.rate_limited.get(event[1], 0) + 1
        elif kind == DISABLED:
            self.disabled[event[1]] = str(event[2])
        elif kind == WORKER:
            self.workers_started += 1
        elif kind == WORKER_LOST:
            self.workers_lost += 1
        elif kind == CANCELLED:
            self.cancelled += int(event[1])
        elif kind == BUDGET_WAIT:
            self.budget_waits += 1
            self.budget_wait_seconds += float(event[1])
