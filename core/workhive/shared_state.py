"""``SharedState``: a fleet-wide key/value area with expiry, on the storage backend."""

from __future__ import annotations

import json
from typing import Any

from workhive.storage import StorageBackend
from workhive.validation import check_name, check_positive, to_json

__all__ = ["SharedState"]


class SharedState:
    """JSON values under one namespace, visible to every process of the fleet.

    >>> async def main(hive):  # doctest: +SKIP
    ...     cooldowns = hive.shared("credential-cooldowns")
    ...     await cooldowns.put("key-1", {"until": 1700000000.0}, ttl=30)
    ...     await cooldowns.get("key-1")
    """

    def __init__(self, backend: StorageBackend, namespace: str) -> None:
        self.namespace = check_name("shared-state namespace", namespace)
        self._backend = backend

    async def put(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``; it reads as absent ``ttl`` seconds from now."""
        await self._backend.state_put(
            self.namespace,
            key,
            to_json(value, "shared-state value"),
            None if ttl is None else check_positive("ttl", ttl),
        )

    async def get(self, key: str, default: Any = None) -> Any:
        raw = await self._backend.state_get(self.namespace, key)
        return default if raw is None else json.loads(raw)

    async def items(self) -> dict[str, Any]:
        """Every unexpired key and value."""
        return {k: json.loads(v) for k, v in (await self._backend.state_scan(self.namespace)).items()}

    async def delete(self, key: str) -> bool:
        return await self._backend.state_delete(self.namespace, key)
