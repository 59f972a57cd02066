"""One API key for one call: take it, reserve its budget, report the outcome, give it back.

``Keys`` holds a worker process's ``CredentialPool`` and ``FleetBudgets``;
``Keys.take(item)`` returns a ``KeyUse``, entered with ``async with``, that
gives the key back (and applies the tokens the handler reported to its
budget) when the block ends. A key with ``concurrency=N`` is handed out with
one of its N fleet-wide in-flight slots (``runtime.key_slots``), given back
with it. In a fleet without ``--credentials`` it holds
no key and its reports do nothing, so a worker runs every item the same way.

>>> async def call(keys: Keys, item):  # doctest: +SKIP
...     key = await keys.take(item)
...     async with key:
...         answer = await api_call(key.credential)
...         await key.report(Outcome.OK)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from workhive import tracing
from workhive.credentials import Outcome
from workhive.errors import InvalidArgument, WorkhiveError
from workhive.models import WorkItem
from workhive.runtime import events as ev
from workhive.runtime.handler import Handler
from workhive.runtime.options import FleetOptions

if TYPE_CHECKING:
    from workhive.budgets import FleetBudgets, Reservation
    from workhive.credentials import Credential, CredentialPool
    from workhive.runtime.counts import SharedCounts
    from workhive.runtime.key_slots import KeySlot, KeySlots

__all__ = ["KeyUse", "Keys", "Outcome"]

log = logging.getLogger("workhive.runtime.keys")

#: seconds a worker waits for a key to free up (more with budgets: see ``Keys``)
ACQUIRE_TIMEOUT = 30.0


class KeyUse:
    """The key taken for one item (``credential`` None: the fleet has no keys), used with ``async with``.

    ``usage``: tokens the handler reported (``HandlerContext.usage``), set before
    the block ends; they correct the key's budget as it is given back.
    """

    __slots__ = ("_keys", "credential", "reservation", "slot", "usage", "went")

    def __init__(
        self,
        keys: Keys,
        credential: Credential | None = None,
        reservation: Reservation | None = None,
        slot: KeySlot | None = None,
    ):
        self._keys = keys
        self.credential = credential
        self.reservation = reservation
        self.slot = slot  # the key's fleet-wide in-flight slot (``concurrency=``), held until given back
        self.usage: float | None = None
        # When the call went (handed out now, called at once): a 429's Retry-After counts from here.
        self.went = keys.credentials.now() if keys.credentials is not None and credential is not None else None

    @property
    def name(self) -> str:
        """The key's name, for events and logs (never its secret); ``-`` without a key."""
        return self.credential.name if self.credential is not None else "-"

    async def report(self, outcome: Outcome, *, retry_after: float | None = None, reason: str | None = None) -> None:
        """Tell the fleet what the call with this key came to: OK, RATE_LIMITED or AUTH_FAILED.

        The budget hears of a 429 first (the rate it paced for was refused), then the
        ``RATE_LIMITED`` event goes out (with or without a key), then the credential
        pool cools the key fleet-wide; AUTH_FAILED disables the key and sends
        ``DISABLED``. A storage hiccup while sharing it is logged, never raised: it
        is not worth the item.
        """
        keys, reservation = self._keys, self.reservation
        if outcome is Outcome.RATE_LIMITED:
            if reservation is not None and keys.budgets is not None:
                await keys.budget_feedback(keys.budgets.rate_limited(reservation, retry_after))
            keys.emit(ev.RATE_LIMITED, self.name)
        if self.credential is not None:
            await keys.report_credential(
                self.credential, outcome, retry_after=retry_after, reason=reason, sent_at=self.went
            )
            if outcome is Outcome.AUTH_FAILED:
                keys.emit(ev.DISABLED, self.name, reason)
        if outcome is Outcome.OK and reservation is not None and keys.budgets is not None:
            await keys.budget_feedback(keys.budgets.succeeded(reservation))

    async def __aenter__(self) -> KeyUse:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._keys.give_back(self)


class Keys:
    """A worker process's keys and their rate budgets (``credentials`` None: the fleet has no keys)."""

    def __init__(
        self,
        credentials: CredentialPool | None,
        budgets: FleetBudgets | None,
        *,
        handler: Handler,
        options: FleetOptions,
        emit: ev.EventSink,
        sleep: Callable[[float], Awaitable[None]],
        stopping: Callable[[], bool],
        metrics: Any = None,
    ) -> None:
        self.credentials = credentials
        self.budgets = budgets
        self._handler = handler
        self._options = options
        self.emit = emit
        self._sleep = sleep
        self._stopping = stopping
        self._metrics = metrics  # workhive.metrics with --metrics-port, else None
        self.counts: SharedCounts | None = None  # the process's counts for the dashboard (runtime.counts)
        self.slots: KeySlots | None = None  # keys' fleet-wide in-flight caps (runtime.key_slots), if any
        self.no_key = KeyUse(self)  # what outcomes are reported to when an item ran without a key
        # Waiting for budget is part of acquiring a key: let it take as long as the budget wait.
        self.timeout = max(ACQUIRE_TIMEOUT, options.budget_wait) if budgets is not None else ACQUIRE_TIMEOUT

    @property
    def active(self) -> bool:
        """Whether items are called with keys (the fleet has ``--credentials``)."""
        return self.credentials is not None

    async def take(self, item: WorkItem) -> KeyUse:
        """A key for ``item``: the one that can go soonest, its call reserved (budgets), else the least recently used.

        Enter the result with ``async with`` at once: leaving the block gives the key
        back. Raises ``NoCredentialAvailable`` when no key frees up in time (or all are
        disabled), and ``InvalidArgument`` when the handler's token estimate is not a
        number >= 0 or can never fit a key's budget (``BudgetUnsatisfiable``).
        """
        if self.credentials is None:
            # Without keys every item shares one: it holds no credential, reservation or slot,
            # so giving it back does nothing and its ``usage`` is never read (a waiting item
            # costs no KeyUse of its own).
            return self.no_key
        if self.budgets is None:
            credential = await self.credentials.acquire(timeout=self.timeout)
            return KeyUse(self, credential, None, await self._slot(self.credentials, credential))
        return await self._take_budgeted(self.credentials, self.budgets, item)

    async def _slot(self, credentials: CredentialPool, credential: Credential) -> KeySlot | None:
        """A fleet-wide in-flight slot of ``credential`` (None: no limit); the key goes back if that fails."""
        if self.slots is None:
            return None
        try:
            return await self.slots.take(credential)
        except BaseException:
            credentials.release(credential)
            raise

    async def _take_budgeted(self, credentials: CredentialPool, budgets: FleetBudgets, item: WorkItem) -> KeyUse:
        # Waits (bounded by --budget-wait) for the reservation's time rather than calling into a 429.
        tokens = self.token_estimate(item)
        reservation: Reservation | None = None

        async def choose(candidates: list[Credential]) -> tuple[int | None, float]:
            nonlocal reservation
            found, wait = await budgets.reserve(candidates, tokens=tokens, max_wait=self._options.budget_wait)
            if found is None:
                return None, max(0.01, wait)  # none can be reserved yet: ask again then
            reservation = found
            return candidates.index(found.credential), 0.0

        while True:
            credential = await credentials.acquire(timeout=self.timeout, choose=choose)
            assert reservation is not None  # acquire returns only the key that choose picked
            # The in-flight slot after the reservation (the key is chosen by its budget) and before
            # the reservation's time: a wait for a slot delays the call, never brings it forward.
            slot = await self._slot(credentials, credential)
            wait = reservation.wait if slot is None else reservation.at + reservation.wait - budgets.now()
            if wait <= 0:
                return KeyUse(self, credential, reservation, slot)
            self.emit(ev.BUDGET_WAIT, round(wait, 4), credential.name)
            try:
                with tracing.budget_wait(credential.name, wait):
                    await self._sleep(wait)
            except BaseException:  # cancelled while waiting: the key and its slot go back
                await self._give_back_slot(slot, credential.name)
                credentials.release(credential)
                raise
            if self._stopping() or (credentials.usable(credential) and not budgets.superseded(reservation)):
                return KeyUse(self, credential, reservation, slot)
            # While this worker slept, a 429 cooled the key or lowered its rate: the slot was
            # spaced for a rate the provider just refused. Choose again rather than call into it.
            await self._give_back_slot(slot, credential.name)
            credentials.release(credential)

    def token_estimate(self, item: WorkItem) -> float:
        """Tokens the call for ``item`` is estimated at: the handler's ``estimate_tokens(data)``, else the default.

        ``InvalidArgument`` when the handler's estimate is not a number >= 0.
        """
        estimate = getattr(self._handler.function, "estimate_tokens", None)
        if estimate is None:
            return self._options.token_estimate
        value = estimate(item.data)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise InvalidArgument(
                f"{self._handler.spec}.estimate_tokens returned {value!r} for item {item.id}; "
                "it must return a number of tokens >= 0"
            )
        return float(value)

    async def give_back(self, key: KeyUse) -> None:
        """Free ``key``'s credential for the next call, then correct its budget by the tokens reported."""
        slot, key.slot = key.slot, None
        await self._give_back_slot(slot, key.name)
        if key.credential is not None and self.credentials is not None:
            self.credentials.release(key.credential)
        if key.reservation is not None and key.usage is not None and self.budgets is not None:
            await self.budget_feedback(self.budgets.report_usage(key.reservation, key.usage))

    async def _give_back_slot(self, slot: KeySlot | None, name: str) -> None:
        if slot is None or self.slots is None:
            return
        try:
            await self.slots.give_back(slot)
        except WorkhiveError as exc:  # the provider frees it when this process ends; never lose the item
            log.warning("giving back an in-flight slot of %s failed: %s", name, exc)

    async def report_credential(
        self,
        credential: Credential,
        outcome: Outcome,
        *,
        retry_after: float | None,
        reason: str | None,
        sent_at: float | None = None,
    ) -> None:
        """Report ``outcome`` to the credential pool (cooldowns shared fleet-wide) and count it for the metrics."""
        assert self.credentials is not None  # only keys taken from the pool are reported
        try:
            await self.credentials.report(credential, outcome, retry_after=retry_after, reason=reason, sent_at=sent_at)
        except WorkhiveError as exc:  # a cooldown that could not be shared is not worth losing the item over
            log.warning("reporting %s for credential %s failed: %s", outcome.name, credential.name, exc)
        if self.counts is not None:
            self.counts.call(credential.name, rate_limited=outcome is Outcome.RATE_LIMITED, rpm=self._rpm(credential))
            self.counts.publish_soon()  # in a task of its own, at most once a second; the heartbeat's too
        if self._metrics is not None:
            state = next((c for c in self.credentials.snapshot() if c.name == credential.name), None)
            self._metrics.observe_credential(
                credential.name, outcome.value, state.state if state else "available", state.until if state else None
            )

    def _rpm(self, credential: Credential) -> float | None:
        """The key's rate per minute now: the one its budget paces to, or its known limit; None if neither."""
        if self.budgets is not None:
            rps = self.budgets.rates().get(credential.name)
            if rps is not None:
                return rps * 60.0
        budget = getattr(credential, "budget", None)
        return getattr(budget, "rpm", None)

    async def budget_feedback(self, call: Awaitable[None]) -> None:
        """Tell the budgets how a call went; a storage hiccup here never costs the item."""
        try:
            await call
        except WorkhiveError as exc:
            log.warning("updating the rate budget failed: %s", exc)
