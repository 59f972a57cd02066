"""Durable steps inside an item: what ``ctx.step`` runs, stores and replays.

A step is one call a handler makes (an API call, a search, a draft) whose
result is worth keeping if the item is tried again. ``ctx.step(key, fn, ...)``
calls ``fn`` and stores its JSON result with the item under ``key``, fenced by
the claim's token (``workhive.storage.KeepsSteps``): a claim that lost its
item cannot store a step, and learns so (``LeaseLost``). A later claim of the
item gets the stored result back without calling ``fn``.

What is guaranteed: a step's result is stored at most once (the first write
under a current claim wins), and ``fn`` is called at least once per item until
one call's result is stored (a process that dies after ``fn`` returned and
before the write calls it again on the next claim, so use ``ctx.step_key``
as the idempotency key of calls that can take one).

>>> async def research(ctx):  # doctest: +SKIP
...     hits = await ctx.step("search", search_api, ctx.data["query"])
...     pages = [await ctx.step(f"page-{i}", fetch, url) for i, url in enumerate(hits[:3])]
...     return await ctx.step("draft", llm, pages, idempotency_key=ctx.step_key("draft"))
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from workhive import tracing
from workhive.errors import InvalidArgument, InvalidItem, Permanent, StepsUnsupported
from workhive.models import StepRecord, WorkItem
from workhive.redaction import scrub_json
from workhive.storage import KeepsSteps
from workhive.validation import printable_text, to_json

if TYPE_CHECKING:
    from workhive.pool import Pool

__all__ = ["MAX_STEP_CHARS", "MAX_STEP_KEY_CHARS", "StepJournal", "check_step_key", "encode_step", "step_key_for"]

#: longest step key, in characters
MAX_STEP_KEY_CHARS = 200
#: largest stored step result, in characters of JSON text (after scrubbing)
MAX_STEP_CHARS = 256 * 1024


def check_step_key(key: object) -> str:
    """A step key: a non-empty string of at most ``MAX_STEP_KEY_CHARS`` printable characters; else ``InvalidArgument``.

    >>> check_step_key("page-3")
    'page-3'
    """
    if not isinstance(key, str):
        raise InvalidArgument(
            f"a step key is a string (e.g. f'page-{{i}}'), got {type(key).__name__} {key!r}", value=key
        )
    if not key or not key.strip():
        raise InvalidArgument("a step key must not be empty or blank: name the step, e.g. ctx.step('search', ...)")
    if len(key) > MAX_STEP_KEY_CHARS:
        raise InvalidArgument(
            f"step key of {len(key)} characters is too long (at most {MAX_STEP_KEY_CHARS}): name the step, "
            "do not put its input in the key",
            value=key,
        )
    if printable_text(key) != key or not key.isprintable():
        raise InvalidArgument(f"step key {key!r} holds control characters or invalid Unicode; use printable text")
    return key


def encode_step(key: str, value: Any) -> str:
    """A step's result as stored: JSON text with every secret the process holds scrubbed, bounded in size.

    ``InvalidItem`` if it is not JSON or its text is longer than ``MAX_STEP_CHARS``.

    >>> encode_step("search", {"hits": 3})
    '{"hits":3}'
    """
    text = scrub_json(to_json(value, f"the result of step {key!r}"))
    if len(text) > MAX_STEP_CHARS:
        raise InvalidItem(
            f"the result of step {key!r} is {len(text)} characters of JSON, more than a step keeps "
            f"({MAX_STEP_CHARS}); store it elsewhere (a file, an object store) and return its address",
            value=None,
        )
    return text


def step_key_for(item: WorkItem, name: str) -> str:
    """A stable idempotency key for step ``name`` of ``item``: the same on every claim of the item.

    Made from the pool, the item's id, its creation time and ``name`` (hashed,
    so it says nothing of them): another item, or an item of another hive
    that happens to have the same id, gets another key.

    >>> step_key_for(item, "draft")  # doctest: +SKIP
    'wh-5f2c…'
    """
    check_step_key(name)
    seed = f"{item.pool}\x00{item.id}\x00{item.created_at!r}\x00{name}".encode("utf-8", "surrogatepass")
    return "wh-" + hashlib.sha256(seed).hexdigest()[:40]


def steps_of(pool_name: str, backend: object) -> KeepsSteps:
    """``backend`` as a ``KeepsSteps``, or ``StepsUnsupported`` naming it and what to do."""
    if isinstance(backend, KeepsSteps):
        return backend
    raise StepsUnsupported(
        f"pool {pool_name!r}: the storage backend {type(backend).__name__} keeps no durable steps, so ctx.step "
        "cannot store one; run the fleet on memory, SQLite, PostgreSQL or Redis storage, or give the backend "
        "step_put/step_list/step_clear (workhive.storage.KeepsSteps)",
        backend=backend,
    )


class StepJournal:
    """The steps of one claim: those stored by earlier claims (read once), and the keys this run used.

    ``HandlerContext.step`` drives it; nothing here is public API.
    """

    __slots__ = ("_claim", "_pool", "_running", "_stored", "_used")

    def __init__(self, pool: Pool, claim: WorkItem) -> None:
        self._pool = pool
        self._claim = claim
        self._stored: dict[str, StepRecord] | None = None
        self._used: set[str] = set()
        self._running: set[str] = set()

    def _begin(self, key: object) -> str:
        key = check_step_key(key)
        if key in self._used or key in self._running:
            raise InvalidArgument(
                f"step key {key!r} was used already in this run of item {self._claim.id}: a replay could "
                "not tell the two apart; give each step its own key (e.g. f'page-{i}' in a loop)",
                value=key,
            )
        self._running.add(key)
        return key

    def _replayed(self, key: str) -> tuple[bool, Any]:
        assert self._stored is not None
        stored = self._stored.get(key)
        if stored is None:
            return False, None
        self._used.add(key)
        self._running.discard(key)
        if stored.failed:
            raise Permanent(f"step {key!r} failed permanently on an earlier attempt: {stored.value}")
        return True, stored.value

    async def _load(self) -> None:
        if self._stored is None:
            records = await self._pool.steps(self._claim.id)
            self._stored = {record.key: record for record in records}

    async def _store(self, key: str, value: Any, failed: bool) -> None:
        await self._pool.put_step(self._claim, key, value, failed=failed)
        self._used.add(key)
        self._running.discard(key)

    def _failed(self, key: str) -> None:
        # Not stored: the step runs again (in this run too, e.g. a retry loop around it).
        self._running.discard(key)

    async def run(self, key: object, fn: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        """The async form: replay the stored result, or call ``fn`` (sync ones in a thread) and store it."""
        key = self._begin(key)
        try:
            await self._load()  # StepsUnsupported here, before fn is called, on a backend without steps
            found, value = self._replayed(key)
            if found:
                return value
            try:
                with tracing.step(key):
                    if inspect.iscoroutinefunction(fn):
                        value = await fn(*args, **kw)
                    else:
                        # A blocking call (requests, an SDK) must not stall the loop's heartbeats.
                        value = await asyncio.to_thread(partial(fn, *args, **kw))
                        if inspect.isawaitable(value):
                            value = await value
            except Permanent as exc:
                await self._store(key, _error_of(exc), True)
                raise
            await self._store(key, value, False)
            return value
        finally:
            if key in self._running:
                self._failed(key)

    def run_sync(
        self,
        loop: asyncio.AbstractEventLoop,
        key: object,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kw: dict[str, Any],
    ) -> Any:
        """The sync form, from a handler's thread: storage calls go to the worker's loop, ``fn`` runs here."""
        key = self._begin(key)

        def on_loop(awaitable: Any) -> Any:
            async def wrapped() -> Any:
                return await awaitable

            return asyncio.run_coroutine_threadsafe(wrapped(), loop).result()

        try:
            on_loop(self._load())
            found, value = self._replayed(key)
            if found:
                return value
            try:
                with tracing.step(key):
                    value = fn(*args, **kw)
                    if inspect.isawaitable(value):
                        value = on_loop(value)
            except Permanent as exc:
                on_loop(self._store(key, _error_of(exc), True))
                raise
            on_loop(self._store(key, value, False))
            return value
        finally:
            if key in self._running:
                self._failed(key)


def _error_of(exc: BaseException) -> str:
    from workhive.pool import error_text  # pool imports this module

    return error_text(exc)
