"""The list backend against workhive's storage contract, exactly as any third party would run it.

Copy this file for your backend. The hooks are all you write; the base
classes bring every test, the multi-process test (when your backend declares
"multiprocess") and the Hypothesis model test. storage.py's rule table in
workhive says which test checks which rule.
"""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Callable

from workhive_listbackend.backend import ListStorage

from workhive.testing import StorageContract, StorageStatefulContract


def _url(tmp_path: pathlib.Path) -> str:
    # One named store per test directory: the same store for make_backend and
    # make_missing_backend, a fresh one for every test.
    return f"list://t-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:24]}"


class TestListContract(StorageContract):
    """The contract on the manual clock: tests move time by hand (``clock`` is a ManualClock)."""

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> ListStorage:
        return ListStorage(_url(tmp_path), clock=clock)

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> ListStorage:
        return ListStorage(_url(tmp_path), clock=clock, create=False)

    # A backend that declares "multiprocess" also overrides multiprocess_store(tmp_path),
    # returning the URL (and picklable options) by which another process opens the same store.


class TestListRealClockContract(TestListContract):
    """The same contract on the real clock (``clock`` is None): time-dependent tests wait with short leases.

    Keep this subclass: it runs the code path your users run, where nobody
    injects a clock. A server backend (time from its database) passes
    ``clock_offset=clock.offset`` in the manual-clock subclass instead.
    """

    supports_manual_clock = False


class TestListStatefulContract(StorageStatefulContract):
    """The Hypothesis model test; always on a ManualClock (server backends: ``clock_offset=clock.offset``)."""

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> ListStorage:
        return ListStorage(_url(tmp_path), clock=clock)
