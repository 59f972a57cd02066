"""A dict-backed stand-in for a storage backend's shared-state area, and a fake clock.

tests/core runs with the core alone (no storage plugin), so credential tests
use this: it implements exactly the ``state_*`` part of the storage contract,
expiring keys on the same fake clock the pool uses.
"""

from __future__ import annotations

import asyncio

from workhive.shared_state import SharedState


class FakeClock:
    """Time that moves only when told (or when a pool sleeps on it)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class DictStateBackend:
    """``state_put/get/scan/delete`` over a dict; values are kept as the JSON text they arrive as."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.rows: dict[tuple[str, str], tuple[str, float | None]] = {}

    async def now(self) -> float:
        return self.clock()

    def _live(self, key: tuple[str, str]) -> str | None:
        row = self.rows.get(key)
        if row is None:
            return None
        value, expires = row
        if expires is not None and expires <= self.clock():
            del self.rows[key]
            return None
        return value

    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        self.rows[(namespace, key)] = (value, None if ttl is None else self.clock() + ttl)

    async def state_get(self, namespace: str, key: str) -> str | None:
        return self._live((namespace, key))

    async def state_scan(self, namespace: str) -> dict[str, str]:
        out = {}
        for ns, key in list(self.rows):
            value = self._live((ns, key)) if ns == namespace else None
            if value is not None:
                out[key] = value
        return out

    async def state_delete(self, namespace: str, key: str) -> bool:
        return self.rows.pop((namespace, key), None) is not None


def shared(backend: DictStateBackend, namespace: str = "workhive-credentials") -> SharedState:
    return SharedState(backend, namespace)  # type: ignore[arg-type]
