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

    #: The most real time one example may take (the server's clock runs meanwhile): 5 s was passed
    #: by an example on a 2-core machine running two test matrices side by side. A stopgap: the
    #: model test should not depend on how long an example takes.
    clock_drift = 30.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=_server_clock(clock))


class TestMemoryServerClockContract(TestMemoryContract):
    """The contract as a server backend runs it: its own running clock plus ``clock.offset()``."""

    clock_drift = 5.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=_server_clock(clock))

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage(_url(tmp_path), clock=_server_clock(clock), create=False)


def _server_clock(clock: Callable[[], float] | None) -> Callable[[], float]:
    """What a server backend given ``clock_offset=clock.offset`` reads: the running clock plus the offset."""
    assert isinstance(clock, ManualClock)
    offset = clock.offset
    return lambda: time.time() + offset()
