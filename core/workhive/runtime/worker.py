"""One async worker: register, claim, run the handler, complete or fail.

A worker never decides policy on its own: the ``ProcessRuntime`` it belongs
to holds the pool, handler, credentials, thread pool and stop flag; the
worker maps each handler outcome to one storage call:

=====================  ====================================================
handler outcome        storage call
=====================  ====================================================
returns a result       ``complete`` (batched through ``complete_many``)
``RateLimited``        credential cools down (fleet-wide); ``release`` —
                       no attempt spent — until ``max_rate_limit_retries``
                       releases, then ``fail``
``AuthFailed``         credential disabled; ``release`` to retry with another
                       (without credentials: ``fail``)
``Permanent``          ``fail(poison=True)``
any other exception    ``fail`` with the hive's backoff
=====================  ====================================================

``LeaseLost`` from any of those means another claim owns the item now (our
lease expired or this worker was reaped): it is logged and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

from workhive.errors import (
    AuthFailed,
    InvalidItem,
    LeaseLost,
    NoCredentialAvailable,
    Permanent,
    RateLimited,
    WorkhiveError,
)
from workhive.models import ItemState, WorkerRegistration, WorkerStatus, WorkItem
from workhive.runtime import events as ev
from workhive.runtime.context import HandlerContext
from workhive.runtime.health import WorkerHealth
from workhive.validation import to_json

if TYPE_CHECKING:
    from workhive.runtime.process import ProcessRuntime

__all__ = ["Worker"]

log = logging.getLogger("workhive.runtime.worker")

#: with the default ``batch=1`` a worker whose handler is fast claims more per call,
#: doubling up to ADAPTIVE_MAX_CLAIM while handlers average under FAST_HANDLER_SECONDS,
#: and drops back to one item as soon as they do not (slow calls keep one claim at a time)
ADAPTIVE_MAX_CLAIM = 32
FAST_HANDLER_SECONDS = 0.002

#: completions are sent in one ``complete_many`` at the end of a claimed batch,
#: or sooner once the oldest waiting one is this old (slow handlers in a batch)
ACK_FLUSH_SECONDS = 0.05


def new_worker_id(slot: int) -> str:
    return f"{socket.gethostname()}-{os.getpid()}-w{slot}-{uuid.uuid4().hex[:6]}"


class Worker:
    """The loop of one async worker inside a worker process."""

    def __init__(self, runtime: ProcessRuntime, slot: int) -> None:
        self.rt = runtime
        self.slot = slot
        self.worker_id = new_worker_id(slot)
        self.health = WorkerHealth(runtime.health_policy)
        self.lost = False  # set by the heartbeat when the registry says we were reaped
        self.unhealthy = False
        self._acks: list[tuple[WorkItem, Any]] = []
        self._adaptive = runtime.options.batch == 1
        self.claim_size = runtime.options.batch
        self._oldest_ack = 0.0

    # -- registration -------------------------------------------------------
    async def register(self) -> None:
        rt = self.rt
        fields: dict[str, Any] = {
            "worker_id": self.worker_id,
            "pools": (rt.pool.name,),
            "capabilities": (f"handler={rt.handler.spec}", f"slot={self.slot}"),
        }
        await rt.hive.workers.register(WorkerRegistration(**fields))
        rt.emit(ev.WORKER, self.worker_id)

    async def reregister(self) -> None:
        """After being declared lost: our claims are gone; come back under a fresh id."""
        old = self.worker_id
        self.rt.emit(ev.WORKER_LOST, old)
        self.worker_id = new_worker_id(self.slot)
        self.lost = False
        log.warning("worker %s was declared lost (missed heartbeats); re-registering as %s", old, self.worker_id)
        await self.register()

    async def deregister(self) -> None:
        """Clean exit: give back whatever this worker still holds, attempts refunded."""
        released = await self.rt.hive.workers.deregister(self.worker_id)
        if released:
            self.rt.emit(ev.RELEASED, released)

    # -- main loop ----------------------------------------------------------
    async def run(self) -> None:
        rt = self.rt
        pool = rt.pool
        idle = True
        while not rt.stopping:
            if self.lost:
                await self.reregister()
            pause = self.health.pause_seconds()
            if pause:
                log.warning(
                    "worker %s: %d failures in a row; pausing %.1fs",
                    self.worker_id,
                    rt.health_policy.failures_before_pause,
                    pause,
                )
                await self._status(WorkerStatus.PAUSED, f"pausing {pause:.1f}s after repeated failures")
                await rt.sleep(pause)
                idle = True
                continue
            if self.health.exhausted:
                self.unhealthy = True
                rt.worker_unhealthy(self)
                return
            try:
                items = await pool.claim_many(self.claim_size, self.worker_id, lease=rt.options.lease)
            except WorkhiveError as exc:
                # storage hiccup (locked database, connection drop): back off, count it against health
                log.warning("worker %s: claim failed: %s", self.worker_id, exc)
                self.health.failure()
                await rt.sleep(min(5.0, 0.1 * 2**self.health.consecutive_failures))
                continue
            if not items:
                if not idle:
                    idle = True
                    await self._status(WorkerStatus.IDLE, None)
                await rt.idle.wait()
                continue
            rt.idle.found_work()
            if idle:
                idle = False
                await self._status(WorkerStatus.BUSY, None)
            await self._run_batch(items)

    async def _status(self, status: WorkerStatus, detail: str | None) -> None:
        try:
            await self.rt.hive.workers.update_status(self.worker_id, status, detail)
        except WorkhiveError as exc:  # informational only; never stop work for it
            log.debug("worker %s: status update failed: %s", self.worker_id, exc)

    async def _run_batch(self, items: list[WorkItem]) -> None:
        started = time.monotonic()
        ran = 0
        try:
            for index, item in enumerate(items):
                # On shutdown or after being reaped, unstarted items of the batch stay
                # claimed: deregistration (or the reaper) puts them back, attempts refunded.
                if self.rt.stopping or self.lost:
                    break
                if self.health.pause_due:
                    # Do not sit on claims through a pause: others can run them meanwhile.
                    for rest in items[index:]:
                        await self._release(rest, delay=0.0)
                    break
                # Tell the supervisor which claim is running: if this process dies, only
                # that item's attempt is spent; the rest of the batch is refunded.
                self.rt.emit(ev.START, self.worker_id, item.id, item.token)
                ran += 1
                await self._run_one(item)
                if self._acks and time.monotonic() - self._oldest_ack >= ACK_FLUSH_SECONDS:
                    await self._flush_acks()
        finally:
            if self._acks:
                await asyncio.shield(self._flush_acks())
        if self._adaptive and ran:
            fast = (time.monotonic() - started) / ran < FAST_HANDLER_SECONDS
            if not fast or self.health.consecutive_failures:
                self.claim_size = 1
            elif len(items) == self.claim_size:
                self.claim_size = min(ADAPTIVE_MAX_CLAIM, self.claim_size * 2)

    async def _flush_acks(self) -> None:
        acks, self._acks = self._acks, []
        try:
            accepted = await self.rt.pool.complete_many(acks)
        except WorkhiveError as exc:
            log.error(
                "worker %s: completing %d items failed (their leases will expire): %s", self.worker_id, len(acks), exc
            )
            return
        done = sum(accepted)
        if done:
            self.rt.emit(ev.DONE, done)
        if done != len(acks):
            refused = [item.id for (item, _), ok in zip(acks, accepted) if not ok]
            log.info(
                "worker %s: completion of %s refused: the lease was lost (expired or reaped); another claim owns it",
                self.worker_id,
                ", ".join(refused),
            )

    # -- one item -----------------------------------------------------------
    async def _run_one(self, item: WorkItem) -> None:
        rt = self.rt
        credential = None
        if rt.credentials is not None:
            try:
                credential = await rt.credentials.acquire(timeout=rt.credential_timeout)
            except NoCredentialAvailable as exc:
                # Every key is cooling down or disabled: hand the item back unspent and let
                # the process decide whether the fleet can go on at all.
                log.warning("worker %s: no credential available: %s", self.worker_id, exc)
                next_at = getattr(exc, "next_available_at", None)
                delay = 1.0 if next_at is None else max(0.0, min(60.0, next_at - time.time()))
                await self._release(item, delay=delay)
                rt.no_credentials(exc)
                return
        try:
            ctx = HandlerContext(
                item=item,
                pool=rt.pool,
                hive=rt.hive,
                worker_id=self.worker_id,
                credential=credential,
                logger=rt.handler_logger,
            )
            try:
                result = await rt.handler(ctx, rt.executor)
            except RateLimited as exc:
                await self._rate_limited(item, credential, exc)
            except AuthFailed as exc:
                await self._auth_failed(item, credential, exc)
            except Permanent as exc:
                await self._fail(item, exc, poison=True)
            except Exception as exc:
                log.info(
                    "worker %s: item %s attempt %d failed: %s: %s",
                    self.worker_id,
                    item.id,
                    item.attempts,
                    type(exc).__name__,
                    exc,
                )
                self.health.failure()
                await self._fail(item, exc)
            else:
                if result is not None:
                    try:
                        to_json(result, "handler result")
                    except InvalidItem as exc:
                        self.health.failure()
                        await self._fail(item, exc)
                        return
                if credential is not None:
                    await rt.report_credential(credential, "OK")
                self.health.success()
                if not self._acks:
                    self._oldest_ack = time.monotonic()
                self._acks.append((item, result))
        finally:
            if credential is not None:
                rt.credentials.release(credential)  # type: ignore[union-attr]

    async def _rate_limited(self, item: WorkItem, credential: Any, exc: RateLimited) -> None:
        rt = self.rt
        name = getattr(credential, "name", None) or "-"
        rt.emit(ev.RATE_LIMITED, name)
        if credential is not None:
            await rt.report_credential(credential, "RATE_LIMITED", retry_after=exc.retry_after)  # type: ignore[attr-defined]
        retry_after: float | None = exc.retry_after  # type: ignore[attr-defined]
        if item.releases >= rt.options.max_rate_limit_retries:
            await self._fail(
                item, f"rate limited {item.releases + 1} times in a row (last: {exc})", retry_after=retry_after
            )
            return
        if credential is not None:
            # The cooldown lives on the key, fleet-wide: the item can go at once with another key
            # (acquire waits while every key cools down).
            delay = 0.0
        else:
            delay = rt.hive.backoff.delay(item.releases + 1, retry_after)
        await self._release(item, delay=delay)

    async def _auth_failed(self, item: WorkItem, credential: Any, exc: AuthFailed) -> None:
        rt = self.rt
        if credential is None:
            self.health.failure()
            await self._fail(item, exc)
            return
        reason = exc.reason or str(exc)  # type: ignore[attr-defined]
        await rt.report_credential(credential, "AUTH_FAILED", reason=reason)
        rt.emit(ev.DISABLED, getattr(credential, "name", "-"), reason)
        if item.releases >= rt.options.max_rate_limit_retries:
            await self._fail(item, f"credentials refused {item.releases + 1} times (last: {exc})")
        else:
            await self._release(item, delay=0.0)

    async def _release(self, item: WorkItem, *, delay: float) -> None:
        try:
            await self.rt.pool.release(item, delay=delay)
        except LeaseLost as exc:
            log.info("worker %s: %s", self.worker_id, exc)
            return
        except WorkhiveError as exc:
            log.error("worker %s: releasing item %s failed (its lease will expire): %s", self.worker_id, item.id, exc)
            return
        self.rt.emit(ev.RELEASED, 1)

    async def _fail(
        self, item: WorkItem, error: BaseException | str, *, poison: bool = False, retry_after: float | None = None
    ) -> None:
        try:
            state = await self.rt.pool.fail(item, error, poison=poison, retry_after=retry_after)
        except LeaseLost as exc:
            log.info("worker %s: %s", self.worker_id, exc)
            return
        except WorkhiveError as exc:
            log.error("worker %s: failing item %s failed (its lease will expire): %s", self.worker_id, item.id, exc)
            return
        self.rt.emit(ev.POISONED if state is ItemState.POISONED else ev.FAILED, 1)
