"""``HandlerContext``: what a handler gets for one item."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from workhive.errors import InvalidArgument
from workhive.item_progress import check_progress
from workhive.locks import HeldLock
from workhive.models import WorkItem
from workhive.steps import StepJournal, step_key_for

if TYPE_CHECKING:
    from workhive.hive import Hive
    from workhive.pool import Pool

__all__ = ["HandlerContext"]

#: guards the lazy making of a context's cancellation event against its setting (one lock for every context)
_EVENTS_MADE = threading.Lock()


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

    __slots__ = (
        "_cancel",
        "_cancelled",
        "_loop",
        "_progress",
        "_steps",
        "credential",
        "hive",
        "item",
        "logger",
        "pool",
        "usage",
        "worker_id",
    )

    def __init__(
        self,
        *,
        item: WorkItem,
        pool: Pool,
        hive: Hive,
        worker_id: str,
        credential: Any = None,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.item = item
        self.pool = pool
        self.hive = hive
        self.worker_id = worker_id
        self.credential = credential
        self.logger = logger if logger is not None else logging.getLogger(f"workhive.handler.{pool.name}")
        #: tokens the handler reported with ``report_usage`` (None: none reported)
        self.usage: float | None = None
        # The worker's loop, where a sync handler's thread sends its step reads and writes.
        # (asyncio._get_running_loop: None outside a loop, where get_running_loop raises; built per item.)
        self._loop = loop if loop is not None else asyncio._get_running_loop()
        self._steps: StepJournal | None = None
        # Set from the worker's event loop when the item is cancelled (Pool.cancel) or times out. The
        # threading.Event a sync handler can wait on (wait_cancelled) is made only when one does: a
        # waiting item costs its context, and an Event with its Condition and locks is ~0.9 KB.
        self._cancelled = False
        self._cancel: threading.Event | None = None
        # The latest ctx.progress value not yet written (the worker writes it at a heartbeat or the end).
        self._progress: dict[str, Any] | None = None

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Report how far the handler got on this item; ``workhive show``, ``status --json`` and the dashboard show it.

        Cheap to call often, from sync and async handlers alike: the worker writes
        the latest value at most once per heartbeat, and the last one when the
        handler ends. ``done`` and ``total`` are numbers >= 0 with ``done <= total``;
        ``note`` a short text (scrubbed of secrets). Bad values raise ``InvalidArgument``.

        >>> async def handler(ctx):  # doctest: +SKIP
        ...     for n, page in enumerate(ctx.data["pages"], 1):
        ...         await summarise(page)
        ...         ctx.progress(n, len(ctx.data["pages"]), note=f"page {n}")
        """
        self._progress = check_progress(done, total, note)

    def _take_progress(self) -> dict[str, Any] | None:
        value, self._progress = self._progress, None
        return value

    @property
    def cancelled(self) -> bool:
        """True once the item was cancelled (``Pool.cancel``) while this handler ran: stop, the result is refused.

        An async handler's task is cancelled as well; a sync handler cannot be
        interrupted, so it should look at this between steps (or wait on it with
        ``wait_cancelled``) and return early. Whatever it returns is not stored.

        >>> def handler(ctx):  # doctest: +SKIP
        ...     for page in ctx.data["pages"]:
        ...         if ctx.cancelled:
        ...             return None
        ...         summarise(page)
        """
        return self._cancelled

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block (a sync handler's thread) until the item is cancelled or ``timeout`` passes; True if cancelled.

        >>> def handler(ctx):  # doctest: +SKIP
        ...     while not ctx.wait_cancelled(timeout=5.0):
        ...         poll_the_long_job()
        """
        if self._cancel is None:
            with _EVENTS_MADE:
                if self._cancel is None:
                    event = threading.Event()
                    if self._cancelled:
                        event.set()
                    self._cancel = event
        return self._cancel.wait(timeout)

    def _cancelled_by_hive(self) -> None:
        with _EVENTS_MADE:  # against a wait_cancelled making the event in a thread right now
            self._cancelled = True
            if self._cancel is not None:
                self._cancel.set()

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

    def report_usage(self, *, tokens: float, credential: Any = None) -> None:
        """Tell the fleet how many tokens the call really used; its key's token budget is corrected.

        An item of a group (``push(..., group=)``) charges them to the group's
        token budget too (``Pool.set_group_budget``), with or without a key:
        once the group's budget is spent, its items wait until it refills.

        The worker reserved the estimate (the handler's ``estimate_tokens``, or
        ``--token-estimate``) before the call; after it, the budget moves by
        ``tokens`` − estimate. Works from sync and async handlers alike (the
        worker applies it when the handler returns); several reports add up.
        ``credential`` (a name or the credential) must be the one leased for
        this item: reporting usage of a key this item did not lease, or with
        no key leased and no group, is an ``InvalidArgument``.

        >>> def handler(ctx):  # doctest: +SKIP
        ...     answer = call_api(ctx.data, key=ctx.credential.secret.reveal())
        ...     ctx.report_usage(tokens=answer["usage"]["total_tokens"])
        """
        if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not math.isfinite(tokens) or tokens < 0:
            raise InvalidArgument(f"report_usage(tokens=...) takes a number of tokens >= 0, got {tokens!r}")
        leased = getattr(self.credential, "name", None)
        if leased is None and getattr(self.item, "group", None) is None:
            raise InvalidArgument(
                "report_usage: no API key is leased for this item and it has no group whose budget it could "
                "charge (run the fleet with --credentials, or push the item with a group)"
            )
        if credential is not None and leased is not None:
            named = credential if isinstance(credential, str) else getattr(credential, "name", repr(credential))
            if named != leased:
                raise InvalidArgument(
                    f"report_usage: key {named!r} is not the one leased for this item ({leased!r}); "
                    "report usage only for the call made with ctx.credential"
                )
        self.usage = (self.usage or 0.0) + float(tokens)

    def step(self, key: str, fn: Callable[..., Any], /, *args: Any, **kw: Any) -> Any:
        """Run ``fn(*args, **kw)`` once per item: its JSON result is stored under ``key``, fenced by this claim.

        In an async handler ``await ctx.step(...)`` (``fn`` sync or async; a sync
        one runs in a thread); in a sync handler ``ctx.step(...)`` returns the
        value. A later claim of the item (after a crash, a failure, a release)
        gets the stored result back without calling ``fn``. A step that raises
        is not stored and runs again next time, unless it raised ``Permanent``:
        that is stored, and raised again on every replay. Each key once per run
        (``InvalidArgument`` for a repeat: a replay could not tell them apart).
        ``LeaseLost`` if this claim lost the item: stop, another claim owns it.
        ``StepsUnsupported`` on a backend that keeps no steps.

        >>> async def agent(ctx):  # doctest: +SKIP
        ...     hits = await ctx.step("search", search, ctx.data["q"])
        ...     return await ctx.step("draft", llm, hits, idempotency_key=ctx.step_key("draft"))
        """
        if self._steps is None:
            self._steps = StepJournal(self.pool, self.item)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            return self._steps.run(key, fn, args, kw)
        if self._loop is None or self._loop.is_closed():
            raise InvalidArgument(
                "ctx.step from a thread needs the worker's event loop: build the HandlerContext on the loop "
                "(or pass loop=) before handing it to a thread"
            )
        return self._steps.run_sync(self._loop, key, fn, args, kw)

    def step_key(self, name: str) -> str:
        """A stable idempotency key for step ``name``: the same on every claim of this item, another for any other item.

        Hand it to APIs that accept one, so the call in flight when a worker died
        is not applied twice when the next claim makes it again.

        >>> requests.post(url, json=body, headers={"Idempotency-Key": ctx.step_key("charge")})  # doctest: +SKIP
        """
        return step_key_for(self.item, name)

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
