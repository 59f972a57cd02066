"""Test helpers for plugin authors: the storage contract suite and a manual clock.

Opt-in (import it from your tests); it is not a pytest plugin of the core.
Your backend's tests subclass the contract classes and override the hooks::

    from workhive.testing import StorageContract, StorageStatefulContract

    class TestMyBackend(StorageContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

        def make_missing_backend(self, clock, tmp_path):  # same store, create=False
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock, create=False)

    class TestMyBackendModel(StorageStatefulContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

Server backends pass ``clock_offset=clock.offset`` where embedded ones pass
``clock=clock``. The rules, and which test checks each, are the table in
``workhive/storage.py``.

Needs pytest, pytest-asyncio and hypothesis (``pip install workhive[testing]``).
Other contract suites (locks, backoff, credentials) live in sibling modules
such as ``workhive.testing.locks`` and are imported by path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workhive.lazy import lazy_attributes

if TYPE_CHECKING:
    from workhive.testing.clock import ManualClock
    from workhive.testing.stateful import StorageStatefulContract
    from workhive.testing.storage import StorageContract

__all__ = ["ManualClock", "StorageContract", "StorageStatefulContract"]

_HOMES = {
    "ManualClock": "workhive.testing.clock",
    "StorageContract": "workhive.testing.storage",
    "StorageStatefulContract": "workhive.testing.stateful",
}

# Lazy, so that importing a sibling suite (workhive.testing.locks) or the
# clock does not pull in pytest and hypothesis.
__getattr__ = lazy_attributes(__name__, _HOMES)
