"""The storage contract suite, as a package: ``StorageContract`` is imported from here."""

from __future__ import annotations

from workhive.testing.storage.contract import StorageContract

__all__ = ["StorageContract"]
