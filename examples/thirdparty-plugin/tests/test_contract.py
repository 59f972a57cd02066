"""The list backend against workhive's storage contract, exactly as any third party would run it.

``make_backend`` is the only thing a backend author writes: the base classes
bring every test, including the Hypothesis model test.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

from workhive_listbackend.backend import ListStorage

from workhive.testing import StorageContract, StorageStatefulContract


class TestListStorage(StorageContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> ListStorage:
        return ListStorage("list://", clock=clock)


class TestListStorageModel(StorageStatefulContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> ListStorage:
        return ListStorage("list://", clock=clock)
