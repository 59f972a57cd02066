"""Hook implementations: what this distribution provides, nothing imported eagerly."""

from __future__ import annotations

from typing import Any

import workhive


def _open(url: str, **options: Any) -> Any:
    # Import the implementation only when a user selects list://.
    from workhive_listbackend.backend import ListStorage

    # Every factory takes create= (and an embedded one clock=); anything else is a user's typo.
    unknown = sorted(set(options) - {"clock", "create"})
    if unknown:
        raise workhive.ConfigError(
            f"list storage does not take the option(s) {', '.join(unknown)}; it accepts clock= and create=", url=url
        )
    return ListStorage(url, **options)


@workhive.hookimpl
def workhive_storage() -> workhive.StoragePlugin:
    return workhive.StoragePlugin(
        name="listbackend",
        factory=_open,
        description="example backend: items in Python lists (O(n), one process)",
        schemes=("list",),
    )
