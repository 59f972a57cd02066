"""Hook implementations: what this distribution provides, nothing imported eagerly."""

from __future__ import annotations

from typing import Any

import workhive


def _open(url: str, **options: Any) -> Any:
    # Import the implementation only when a user selects list://.
    from workhive_listbackend.backend import ListStorage

    return ListStorage(url, **options)


@workhive.hookimpl
def workhive_storage() -> workhive.StoragePlugin:
    return workhive.StoragePlugin(
        name="listbackend",
        factory=_open,
        description="example backend: items in Python lists (O(n), one process)",
        schemes=("list",),
        # Every factory takes create= (and an embedded one clock=); workhive.open refuses anything else.
        options=("clock", "create"),
    )
