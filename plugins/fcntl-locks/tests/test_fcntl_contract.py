"""The lock contract, run against fcntl locks."""

from __future__ import annotations

from pathlib import Path

from workhive.locks import LockProvider
from workhive.testing.locks import LockContract
from workhive_fcntl_locks import FcntlLocks


class TestFcntlLocks(LockContract):
    persistent_tokens = True

    def make_provider(self, tmp_path: Path) -> LockProvider:
        return FcntlLocks(f"fcntl:///{tmp_path}/locks")
