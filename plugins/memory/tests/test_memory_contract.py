"""The memory backend against the full storage contract (including the model test)."""

from __future__ import annotations

import hashlib
import pathlib
import time
from collections.abc import Callable

from workhive.testing import ManualClock, StorageContract, StorageStatefulContract
from workhive_memory.backend import MemoryStorage


def _url(tmp_path: pathlib.Path) -> str:
    # A named store per test directory, so create=False has a store to find (or not).
    return f"memory://t-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:24]}"


class TestMemoryContract(StorageContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=clock)

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=clock, create=False)


class TestMemoryRealClockContract(TestMemoryContract):
    """The same contract on the real clock: the path a database-clock backend takes."""

    supports_manual_clock = False


class TestMemoryStatefulContract(StorageStatefulContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=clock)


class TestMemoryServerClockStatefulContract(StorageStatefulContract):
    """The model test as a server backend runs it: the clock keeps running, the suite only adds an offset.

    A server backend reads its server's time and adds ``clock_offset()``; this
    memory store does the same with the machine's clock, so the server path of
    the model test (times within ``clock_drift``, durations spaced beyond it)
    is itself tested without a server.
    """

    clock_drift = 5.0  # the most real time one storage call takes (the server's clock runs meanwhile)

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=_server_clock(clock))


class TestMemoryServerClockContract(TestMemoryContract):
    """The contract as a server backend runs it: its own running clock plus ``clock.offset()``."""

    clock_drift = 5.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=_server_clock(clock))

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=_server_clock(clock), create=False)


class _SlowWall:
    """A wall clock that moves 0.5 s forward at every read: a machine so loaded each call takes that long."""

    def __init__(self) -> None:
        self.now = time.time()

    def read(self) -> float:
        self.now += 0.5
        return self.now


_SLOW = _SlowWall()


class TestMemoryOnALoadedMachineStatefulContract(StorageStatefulContract):
    """The server path of the model test when every storage call takes a long time in real time.

    Each read of this server's clock is 0.5 s later than the one before, so one example spans
    minutes: a model whose clock stood still while the server's ran (until 2026-11) drifted
    past ``clock_drift`` and failed ("available_at differs"). One call still takes far less.
    """

    clock_drift = 5.0
    max_examples = ci_max_examples = 25
    server_clock = staticmethod(_SLOW.read)

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=_server_clock(clock, _SLOW.read))


def _server_clock(clock: Callable[[], float] | None, wall: Callable[[], float] = time.time) -> Callable[[], float]:
    """What a server backend given ``clock_offset=clock.offset`` reads: the running clock plus the offset."""
    assert isinstance(clock, ManualClock)
    offset = clock.offset
    return lambda: wall() + offset()
