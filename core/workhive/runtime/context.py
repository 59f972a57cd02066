"""``HandlerContext``: what a handler gets for one item."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from workhive.locks import HeldLock
from workhive.models import WorkItem

if TYPE_CHECKING:
    from workhive.hive import Hive
    from workhive.pool import Pool

__all__ = ["HandlerContext"]


class HandlerContext:
    """One item's claim as a handler sees it.

    ``data`` is the pushed data, ``attempt`` the claim number (1 on the first
    try), ``credential`` the credential leased for this item (None when the
    fleet runs without credentials), ``worker_id`` the worker holding the
    claim. ``lock(name)`` holds a fleet-wide named lock for a block.

    >>> async def summarise(ctx: HandlerContext) -> dict:  # doctest: +SKIP
    ...     ctx.logger.info("summarising %s (attempt %d)", ctx.data["url"], ctx.attempt)
    ...     async with ctx.lock(f"site:{ctx.data['host']}", ttl=60):
    ...         text = await fetch(ctx.data["url"], key=ctx.credential.secret)
    ...     return {"summary": text[:200]}
    """

    __slots__ = ("credential", "hive", "item", "logger", "pool", "worker_id")

    def __init__(
        self,
        *,
        item: WorkItem,
        pool: Pool,
        hive: Hive,
        worker_id: str,
        credential: Any = None,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
    ) -> None:
        self.item = item
        self.pool = pool
        self.hive = hive
        self.worker_id = worker_id
        self.credential = credential
        self.logger = logger if logger is not None else logging.getLogger(f"workhive.handler.{pool.name}")

    @property
    def data(self) -> Any:
        """The item's data as pushed (decoded from JSON)."""
        return self.item.data

    @property
    def attempt(self) -> int:
        """Which claim of the item this is, from 1 (rate-limit and shutdown releases do not count)."""
        return self.item.attempts

    @property
    def item_id(self) -> str:
        return self.item.id

    @contextlib.asynccontextmanager
    async def lock(
        self, name: str, *, ttl: float | None = None, timeout: float | None = None
    ) -> AsyncIterator[HeldLock]:
        """Hold the fleet-wide lock ``name`` for the block (``hive.lock``); yields it with its fencing ``token``."""
        async with self.hive.lock(name, ttl=ttl, timeout=timeout, worker_id=self.worker_id) as held:
            yield held

    def __repr__(self) -> str:
        cred = getattr(self.credential, "name", None)
        return (
            f"<HandlerContext pool={self.pool.name!r} item={self.item.id!r} attempt={self.attempt} "
            f"worker={self.worker_id!r} credential={cred!r}>"
        )
