"""The worker of a worker process: register once, claim for every free lane, run, complete or fail.

A process registers one ``Worker`` (one registry row, one heartbeat a beat)
that holds up to ``concurrency`` items in flight: ``Worker.run`` is one claim
loop that claims (``claim_many``) as many items as it has free lanes and runs
each claimed batch as a task of its own (a *lane*), so concurrency never means
claimers racing for the same rows. Each handler outcome maps to one storage
call (``complete``, batched across lanes, ``fail``, ``release``), reported to
the item's key (``runtime.keys``); a crash suspect runs alone
(``runtime.isolation``); calls storage did not answer are sent again before
the worker claims more (``runtime.settlement``). The outcome table and the
reasons: ``docs/runtime.md``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from workhive import tracing
from workhive.errors import (
    AuthFailed,
    InvalidArgument,
    InvalidItem,
    ItemNotFound,
    LeaseLost,
    NoCredentialAvailable,
    OutcomeUnknown,
    Permanent,
    RateLimited,
    StorageCorrupt,
    WorkhiveError,
)
from workhive.item_progress import write_progress
from workhive.models import ItemState, WorkerRegistration, WorkerStatus, WorkItem
from workhive.pool import error_text
from workhive.runtime import events as ev
from workhive.runtime.board import BATCH_LIMIT
from workhive.runtime.context import HandlerContext
from workhive.runtime.health import WorkerHealth
from workhive.runtime.keys import KeyUse, Outcome
from workhive.runtime.settlement import Kind, Settlement, announce, earlier_send_applied
from workhive.storage import INSTANT_CLAIM_MAX_LIMIT, Cancels, instant_claim_max
from workhive.validation import to_json

if TYPE_CHECKING:
    from workhive.credentials import Credential
    from workhive.runtime.process import ProcessRuntime

__all__ = ["Worker"]

log = logging.getLogger("workhive.runtime.worker")
T = TypeVar("T")

#: with the default ``batch=1`` a worker whose handler is fast claims more per call, doubling
#: while a lane's batch would still take under LANE_BATCH_SECONDS of handler time (a 5 ms call:
#: batches of up to 8; 40 ms or more: one item a claim), up to ADAPTIVE_MAX_CLAIM, and drops to
#: that size as soon as the handlers take longer (slow calls keep one claim at a time). A claim of
#: one item for each 5 ms call cost a claim round trip per item, with the lane idle meanwhile: on
#: SQLite 4 x 4 lanes drained 2,288 items/s and 0.47 ms of worker CPU an item, against 2,548/s and
#: 0.32 ms in batches of 4 (the ideal is 3,200/s). At 20 ms a batch (4 such items) a PostgreSQL
#: fleet of 4 x 4 lanes drained 2,576 items/s, and 2,290/s from 23 groups (bench/fairness: a
#: grouped claim costs the server about four times an ungrouped one, and each lane's batch was a
#: claim); at 40 ms (8 items), 2,883/s and 2,805/s in the same bench, and SQLite 2,960/s against
#: 2,918/s. A batch's items wait for the ones before it, so the bound is in time: the lane holds
#: at most LANE_BATCH_SECONDS of work that another could run.
#: A process's lanes together hold at most ADAPTIVE_MAX_HELD items claimed that way (each
#: lane's batch is at most ADAPTIVE_MAX_HELD // concurrency): with a batch of 128 a lane, 128
#: lanes could hold 16,384 items that the fleet's other processes cannot claim (docs/runtime.md).
#: 256, not 128: a claim's fixed cost (a round trip, and on PostgreSQL a grouped claim's rounds)
#: is shared by twice the items. PostgreSQL, `work` no-op 2 x 1 draining 50,000 jobs, runs
#: interleaved: 1.51-1.62 s against 1.67-1.95 s; bench/fairness's no-op fleet (4 x 4) 43-44k
#: items/s ungrouped against 37-42k, grouped/ungrouped 0.92x against 0.89-0.91x.
#: A backend may ask for another size (``instant_claim_max``, workhive/storage.py): PostgreSQL asks
#: for 512, where a 2 x 1 no-op drain of 50,000 jobs took 1.41-1.51 s against 1.54-1.57 s at 256
#: (worker CPU 0.70-0.72 s against 0.76-0.78 s); on SQLite 512 put the grouped no-op fleet of
#: bench/fairness at 0.84x and 0.87x its ungrouped one, against 0.90x and 0.90x at 256.
ADAPTIVE_MAX_CLAIM = 256
ADAPTIVE_MAX_HELD = INSTANT_CLAIM_MAX_LIMIT  # 1,024
LANE_BATCH_SECONDS = 0.04
#: handlers this quick on average (a no-op, a dict lookup) never wait on anything, so lanes give them
#: no concurrency, only a task each: their batches grow to ADAPTIVE_MAX_CLAIM whatever the concurrency,
#: fewer lanes carrying them, and the claim itself keeps what the process holds within ADAPTIVE_MAX_HELD
#: (at concurrency 256 a batch of 4 a lane made a task, and its bookkeeping, for every 4 items)
INSTANT_HANDLER_SECONDS = 0.0001

#: storage calls failing this many times with no item finished in between (claims pausing,
#: doubling up to CLAIM_RETRY_MAX seconds) mean the fault lasts: the process stops and the
#: fleet ends with the fault as its reason
MAX_STORAGE_FAULTS = 8
CLAIM_RETRY_MAX = 5.0

#: completions are sent in one ``complete_many`` at the end of a claimed batch,
#: or sooner once the oldest waiting one is this old (slow handlers in a batch); with other
#: lanes running, a lane's completions wait up to this long for theirs, to share one call
ACK_FLUSH_SECONDS = 0.05
#: ...or until this many are waiting (one call, one statement, bounded in size)
ACK_BATCH_MAX = 500

#: with items in flight, the claim loop waits up to CLAIM_GATHER_SECONDS for a quarter of its
#: lanes to be free before it claims, so that a waiting fleet claims in batches rather than
#: one item for each handler that returns; MAX_CLAIM bounds one claim call
CLAIM_GATHER_SECONDS = 0.05
MAX_CLAIM = 1000

#: characters of item ids in one DONE event: with the rest of the line, well under PIPE_BUF (events.PipeSink)
DONE_EVENT_CHARS = 2500

#: claims announced in one STARTS event: well under PIPE_BUF, so that the write is atomic (events.PipeSink)
STARTS_PER_EVENT = 50


def _id_width(item_id: str) -> int:
    """What ``item_id`` takes in an event's JSON line, at most: escapes for anything but letters and digits."""
    return len(item_id) + 3 if item_id.isascii() and item_id.isalnum() else 12 * len(item_id) + 3


def _event_lines(entries: Iterable[T], width: Callable[[T], int]) -> Iterator[list[T]]:
    """``entries`` in runs whose ``width``s add up to DONE_EVENT_CHARS at most (one entry at least): an event line each.

    Each line stays under ``PIPE_BUF`` with the rest of its event, so its write is whole (events.PipeSink).
    """
    chunk: list[T] = []
    chars = 0
    for entry in entries:
        size = width(entry)
        if chunk and chars + size > DONE_EVENT_CHARS:
            yield chunk
            chunk, chars = [], 0
        chunk.append(entry)
        chars += size
    if chunk:
        yield chunk


class _Running:
    """A claim whose handler is running: its context, and the task to cancel when the handler is async.

    (The handler's own task with a timeout; otherwise its lane's, which runs the handler itself.)
    """

    __slots__ = ("ctx", "item", "task")

    def __init__(self, item: WorkItem, ctx: HandlerContext) -> None:
        self.item = item
        self.ctx = ctx
        self.task: asyncio.Future[Any] | None = None


class TimedOut(Exception):
    """A handler ran past the fleet's ``--timeout`` on an item: a failure like any other (retried, then poisoned)."""


class _CancelledByHive(Exception):
    """An async handler's task was cancelled because its item was (``Pool.cancel``): not a failure."""


async def _outcome(call: Awaitable[Any]) -> tuple[Any, BaseException | None]:
    """``call``'s result, or what it raised, as a value.

    A task that raises ``SystemExit`` or ``KeyboardInterrupt`` sends it out of the
    event loop itself; kept as a value, it reaches the worker's handling of a
    handler that ends its process. Cancellation still cancels the task.
    """
    try:
        return await call, None
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        return None, exc


def _uncancel(task: asyncio.Future[Any] | None) -> None:
    """A task's cancellation was handled (Python 3.11+ counts them; timeouts and task groups read the count)."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()


def new_worker_id(slot: int) -> str:
    return f"{socket.gethostname()}-{os.getpid()}-w{slot}-{uuid.uuid4().hex[:6]}"


class Worker:
    """The worker of one process: one registration, one claim loop, up to ``concurrency`` items in flight."""

    def __init__(self, runtime: ProcessRuntime, slot: int = 0) -> None:
        self.rt = runtime
        self.slot = slot
        self.worker_id = new_worker_id(slot)
        self.capacity = max(1, runtime.options.concurrency)
        # Lanes: each runs one claimed batch as a task (one item, for handlers that wait). A free
        # lane's number is reused, so the supervisor's record of what runs stays as small as the lanes.
        self._free_lanes = list(range(self.capacity - 1, -1, -1))
        self._lanes: set[asyncio.Task[None]] = set()
        self._lane_freed = asyncio.Event()
        self._wake_at_free = 1  # free lanes at which a lane ending wakes the claim loop (_wait_for_lane)
        self._kick = asyncio.Event()  # an idle claim loop has something to do: settlements to send again
        self._crashed: BaseException | None = None  # a lane that raised: the worker ends with it
        self._lanes_cancelled = False  # the grace period ran out: run() cancels every lane
        self.items_in_flight = 0  # claimed items whose lane has not ended
        self._flushes: set[asyncio.Future[None]] = set()  # completions being sent, waited for before exit
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flush_queued: asyncio.Future[None] | None = None  # a flush made that has not taken its completions yet
        self._cancelled_count: int | None = None  # the pool's cancelled items at the last look (check_cancelled)
        self._last_status: WorkerStatus | None = None
        self._reported_in_flight: int | None = None  # the count the registry's detail says (report_in_flight)
        self.health = WorkerHealth(runtime.health_policy)
        self.lost = False  # set by the heartbeat when the registry says we were reaped
        self.registered = False
        self.storage_faults = 0  # storage calls that failed since an item last finished
        self.unhealthy = False
        self._acks: list[tuple[WorkItem, Any]] = []
        self._adaptive = runtime.options.batch == 1
        self.claim_size = runtime.options.batch
        self._max_lane_batch = max(1, min(ADAPTIVE_MAX_CLAIM, ADAPTIVE_MAX_HELD // self.capacity))
        # An instant handler's batches grow to what the backend says its claims are best at (storage.py).
        self._instant_max = instant_claim_max(runtime.hive.storage) or ADAPTIVE_MAX_CLAIM
        # Batches of several items are announced once and their progress written to the lane board
        # (runtime.board) instead of a START per item; the board's slots are this worker's lanes.
        self._board = runtime.board if runtime.board is not None and runtime.board.lanes >= self.capacity else None
        self._batches = 0  # the number of the last batch announced on the board
        self._oldest_ack = 0.0
        # The registry's status is informational, so it is written beside the work, not before it:
        # an item picked up after an idle spell starts without waiting for the BUSY round trip.
        self._status_wanted: tuple[WorkerStatus, str | None] | None = None
        self._status_writer: asyncio.Task[None] | None = None
        self._deregistering = False  # from then on no status is written: STOPPED is the last word
        # Settling calls storage did not answer: sent again before this worker claims more.
        self.unsettled: list[Settlement] = []
        self.gave_up = False  # the fault budget ran out with calls unanswered: no more heartbeats
        self._closing = False  # the last pass before deregistering: failures no longer count as faults
        self._claim_unknown = False  # a claim's outcome was unknown: it may have taken items unseen
        # The process's event loop, for contexts built in the thread pool (a sync ctx.step calls storage there).
        self._loop: asyncio.AbstractEventLoop | None = None
        # The claims whose handler runs now (the heartbeat looks them up for cancellations), and the
        # ids cancelled while running: their outcome is not settled (storage holds them CANCELLED).
        self.running: dict[str, _Running] = {}
        self.cancelled: set[str] = set()
        # Contexts of handlers that ended with a progress value not yet written (written as they settle).
        self.ended_contexts: dict[str, HandlerContext] = {}
        # Tokens the handlers of a thread trip reported (ctx.report_usage), by item id, for their groups' budgets.
        self.thread_usage: dict[str, float] = {}

    @property
    def lanes_busy(self) -> int:
        """Lanes running a claimed batch now (at most ``concurrency``)."""
        return self.capacity - len(self._free_lanes)

    @property
    def heartbeat_wanted(self) -> bool:
        """Whether the process beats for this worker: registered, not lost, and not given up on.

        A worker that gave up on unanswered settlements is left unbeaten, so
        that the claims storage never answered for expire within a lease.
        """
        return self.registered and not self.lost and not self.gave_up

    # -- registration -------------------------------------------------------
    async def register(self) -> None:
        rt = self.rt
        fields: dict[str, Any] = {
            "worker_id": self.worker_id,
            "pools": (rt.pool.name,),
            "capabilities": (f"handler={rt.handler.spec}", f"concurrency={self.capacity}"),
        }
        await rt.hive.workers.register(WorkerRegistration(**fields))
        self.registered = True
        self._deregistering = False
        rt.emit(ev.WORKER, self.worker_id)

    async def reregister(self) -> None:
        """After being declared lost: our claims are gone; come back under a fresh id."""
        old = self.worker_id
        self.rt.emit(ev.WORKER_LOST, old)
        self.worker_id = new_worker_id(self.slot)
        self.lost = False
        self._claim_unknown = False  # the old id's claims were released when it was declared lost
        log.warning("worker %s was declared lost (missed heartbeats); re-registering as %s", old, self.worker_id)
        await self.register()

    async def deregister(self) -> None:
        """Clean exit: give back whatever this worker still holds, attempts refunded.

        Sent once more if its outcome is unknown: a repeat gives nothing back
        twice (an item given back is no longer claimed), and a claim completed
        meanwhile is DONE, which deregistration never touches. Whatever the
        answer, the worker is not heart-beaten afterwards: if storage did not
        take it, what the worker holds expires within a lease.
        """
        # A status still to be written is moot now, and so is any wished later (a heartbeat's in-flight
        # count, a lane ending): written after deregistration it would overwrite STOPPED. The one in
        # flight lands first.
        self._deregistering = True
        self._status_wanted = None
        if self._status_writer is not None:
            await asyncio.wait({self._status_writer})
        try:
            try:
                released = await self.rt.hive.workers.deregister(self.worker_id)
            except OutcomeUnknown as exc:
                log.warning("worker %s: deregistering: %s; sending it again", self.worker_id, exc)
                released = await self.rt.hive.workers.deregister(self.worker_id)
        finally:
            self.registered = False
        if released:
            self.rt.emit(ev.RELEASED, released)

    async def settle_before_exit(self) -> None:
        """Before deregistering: send once more what storage has not answered.

        Deregistration refunds every claim the worker still holds: a completion
        that was never applied would run again, and one applied unseen would go
        uncounted. Completions still waiting to share a call are sent now, and flushes
        still running (from a cancelled lane too) are waited for first.
        """
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._acks:
            self._start_flush()
        if self._flushes:
            await asyncio.wait(set(self._flushes))
        if not self.unsettled:
            return
        self._closing = True
        if not await self._resettle():
            log.warning(
                "worker %s: storage did not answer %s; deregistering gives back those claims still live",
                self.worker_id,
                ", ".join(s.action for s in self.unsettled[:10]) + (" and more" if len(self.unsettled) > 10 else ""),
            )

    async def _resettle(self) -> bool:
        """Send every unanswered settlement again, same fencing token; True once storage answered them all."""
        pending, self.unsettled = self.unsettled, []
        completions = [(s.item, s.result) for s in pending if s.kind is Kind.COMPLETE]
        if completions:
            await self._complete(completions, resent=True)
        others = [s for s in pending if s.kind is not Kind.COMPLETE]
        for n, settlement in enumerate(others):
            if self.rt.stopping and not self._closing:
                self.unsettled.extend(others[n:])  # the last pass before deregistering sends them
                break
            if settlement.kind is Kind.FAIL:
                await self._send_fail(settlement, resent=True)
            else:
                await self._send_release(settlement, resent=True)
        return not self.unsettled

    async def _give_back_unknown(self) -> bool:
        """Give back what a claim whose outcome was unknown may have taken; True once storage answered.

        Such items are claimed under this worker's id but never reached it, and its
        heartbeat would renew their leases forever. A worker claims only when it
        holds nothing it knows of (every settlement answered), so whatever it holds
        in the pool now came from that claim: all of it goes back, attempts refunded
        (none of it ran). Safe to repeat: an item given back is no longer held.
        """
        try:
            released = await self.rt.pool.release_by_worker(self.worker_id, spend_attempt=False)
        except WorkhiveError as exc:
            if self._storage_fault("giving back what a claim with an unknown outcome took (to be tried again)", exc):
                self.gave_up = True
            return False
        self._claim_unknown = False
        if released:
            log.warning(
                "worker %s: a claim whose answer was lost had taken %d item(s); given back, attempts refunded",
                self.worker_id,
                released,
            )
            self.rt.emit(ev.RELEASED, released)
        return True

    def _defer(self, settlements: list[Settlement], action: str, exc: WorkhiveError) -> None:
        """Keep settlements storage did not answer, to be sent again before this worker claims more.

        Each failed send counts against the worker's storage-fault budget. Once it
        is spent the process stops and this worker is no longer heart-beaten: a
        claim storage never answered for then expires within a lease and another
        claim takes the item, instead of being renewed for as long as the process lives.
        """
        self.unsettled.extend(settlements)
        self._kick.set()  # the claim loop sends them again before it claims, even while it waits for work
        if self._closing:  # the last pass before deregistering: the process is stopping anyway
            log.warning("worker %s: %s failed again: %s", self.worker_id, action, exc)
        elif self._storage_fault(f"{action} (to be sent again)", exc):
            self.gave_up = True

    # -- main loop ----------------------------------------------------------
    async def run(self) -> None:
        """Claim and run items until the process stops; in-flight items finish first (the process bounds the wait).

        Cancelled (at the end of the grace period), it cancels its lanes: their finished
        completions are still sent (shielded), their unstarted items stay claimed and
        deregistration gives them back unspent.
        """
        try:
            await self._claim_loop()
            if self._lanes:
                await asyncio.wait(set(self._lanes))
        except asyncio.CancelledError:
            self._lanes_cancelled = True  # a cancellation a lane sees from now on is this one, not Pool.cancel
            lanes = set(self._lanes)
            for lane in lanes:
                lane.cancel()
            if lanes:
                await asyncio.wait(lanes, timeout=1.0)
            raise
        if self._crashed is not None:
            raise self._crashed

    async def _claim_loop(self) -> None:
        rt = self.rt
        pool = rt.pool
        idle = True
        if isinstance(rt.hive.storage, Cancels):
            await self._count_cancelled()  # the baseline check_cancelled compares with
        while not rt.stopping and self._crashed is None:
            if not self.registered:
                try:
                    await self.register()
                except WorkhiveError as exc:
                    log.warning("worker %s: registering failed: %s", self.worker_id, exc)
                    self.health.failure()
                    await rt.sleep(min(5.0, 0.1 * 2**self.health.consecutive_failures))
                    if self.health.exhausted:
                        self.unhealthy = True
                        rt.worker_unhealthy(self)
                        return
                    continue
            if self.lost:
                # Lanes still running claims of the old id finish; their settlements are refused (reaped).
                await self.reregister()
            if self._claim_unknown and (self._lanes or self._flushes):
                # Giving back what the unknown claim took gives back all this worker holds:
                # the lanes running now finish first, and the completions on their way are
                # answered (see _give_back_unknown).
                if self._lanes:
                    await self._wait_for_lane(None)
                else:
                    await asyncio.wait(set(self._flushes))
                continue
            if (self.unsettled and not await self._resettle()) or (
                self._claim_unknown and not await self._give_back_unknown()
            ):
                # Until storage answers, those items stay claimed by this worker and its heartbeat
                # renews them: claiming more would only add to what is held. Each failed try counts
                # against the storage-fault budget, which bounds the wait (see _defer).
                await rt.sleep(min(CLAIM_RETRY_MAX, 0.1 * 2**self.storage_faults))
                continue
            pause = self.health.pause_seconds()
            if pause:
                log.warning(
                    "worker %s: %d failures in a row; pausing %.1fs",
                    self.worker_id,
                    rt.health_policy.failures_before_pause,
                    pause,
                )
                self._status(WorkerStatus.PAUSED, f"pausing {pause:.1f}s after repeated failures")
                await rt.sleep(pause)
                idle = True
                continue
            if self.health.exhausted:
                self.unhealthy = True
                rt.worker_unhealthy(self)
                return
            if not self._free_lanes:
                await self._wait_for_lane(None)
                continue
            if self._lanes and len(self._free_lanes) < max(1, self.capacity // 4):
                # Items in flight: let more lanes come free so that one claim fills them together.
                await self._wait_for_lane(CLAIM_GATHER_SECONDS, until_free=max(1, self.capacity // 4))
                if rt.stopping:
                    break
            size = self.claim_size  # as claimed: a lane ending meanwhile may change claim_size
            want = min(MAX_CLAIM, len(self._free_lanes) * size)
            if size > self._max_lane_batch:
                # Batches past the per-lane bound (instant handlers): the claim keeps the bound on what
                # the process holds, and when that is reached it waits for a lane, with lanes free.
                want = min(want, ADAPTIVE_MAX_HELD - self.items_in_flight)
                if want < size and self._lanes:  # less than a batch: a lane ending frees one
                    await self._wait_for_lane(None)
                    continue
            # From here on a settlement that frees a slot kicks the wait below: one made while this
            # claim is on its way may have come too late for it.
            self._kick.clear()
            try:
                items = await pool.claim_many(want, self.worker_id, lease=rt.options.lease)
            except WorkhiveError as exc:
                # A storage hiccup (locked database, connection drop) passes: back off, count it
                # against health. One that lasts (a full disk, a corrupt file) ends the process
                # with the fault as its reason, after a bounded number of tries in a row.
                if isinstance(exc, OutcomeUnknown):
                    # The claim may have taken items that never reached this worker: see _give_back_unknown.
                    self._claim_unknown = True
                if self._storage_fault("claim", exc):
                    return
                self.health.failure()
                await rt.sleep(min(CLAIM_RETRY_MAX, 0.1 * 2**self.storage_faults))
                continue
            if not items:
                self.storage_faults = 0  # storage answered and there is nothing to do: no fault
                if not idle:
                    idle = True
                    if self._flushes:
                        # Completions still on their way hold their items claimed: the supervisor's
                        # read on the hint below would find the pool not yet drained.
                        await asyncio.wait(set(self._flushes))
                    # Before the status write: the supervisor of an --until-empty run reads the
                    # pool's counts on this hint instead of at its next periodic read.
                    rt.emit(ev.RAN_DRY, self.worker_id)
                    if not self._lanes:
                        self._status(WorkerStatus.IDLE, None)
                await self._wait_for_work()
                continue
            rt.idle.found_work()
            if idle:
                idle = False
                self._status(WorkerStatus.BUSY, None)
            self._start_lanes(items, size)

    async def _wait_for_work(self) -> None:
        """Wait for the process's wake-up (work may be there, or it stops), or for settlements to send again."""
        if self.unsettled:
            return
        kick = asyncio.ensure_future(self._kick.wait())  # cleared before the claim that found nothing
        work = asyncio.ensure_future(self.rt.idle.wait())
        try:
            await asyncio.wait({kick, work}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            kick.cancel()
            work.cancel()

    def _start_lanes(self, items: list[WorkItem], size: int) -> None:
        """Run ``items`` in free lanes, ``size`` to a lane (one item each, for handlers that wait).

        ``items`` came from a claim of at most ``size`` per free lane, and lanes only come
        free while it ran: there is a lane for every batch.
        """
        loop = asyncio.get_running_loop()
        rt = self.rt
        size = max(1, size)
        # A lane of one item (slow handlers: a waiting fleet) is announced to the supervisor here,
        # all of a claim's in a few writes (STARTS), rather than one START per lane: a claim of N
        # items was N writes to the pipe and N events for the supervisor to parse. The announcement
        # is made before any lane runs, so the supervisor knows each claim before its handler
        # starts, as with START. Not for lanes of several items (each START moves the supervisor's
        # record of the lane on to the item running now), nor for items that may be crash suspects
        # (given back before: they are looked up and may run alone, announced as they start), nor
        # while an item runs or waits to run alone (the supervisor's record of the claim running
        # alone must stay the last word), nor for a plain-function handler (its thread trips
        # announce each item themselves).
        announce = rt.handler.is_async and not rt.gate.exclusive_wanted
        # Batches of several items go on the lane board, under the same rule as STARTS (nothing runs
        # alone or waits to), and not with keys (the supervisor times each call from its START).
        board = None if rt.gate.exclusive_wanted or rt.keys.active else self._board
        epoch = rt.gate.exclusive_runs
        starts: list[Any] = []
        for start in range(0, len(items), size):
            batch = items[start : start + size]
            lane = self._free_lanes.pop()
            self.items_in_flight += len(batch)
            first = batch[0]
            announced = announce and len(batch) == 1 and first.releases == 0
            number = 0
            if announced:
                starts += (lane, first.id, first.token)
                if len(starts) >= 3 * STARTS_PER_EVENT:
                    rt.emit(ev.STARTS, self.worker_id, *starts)
                    starts = []
            elif board is not None and len(batch) > 1:
                number = self._announce_batch(lane, batch)
            task = loop.create_task(self._lane(lane, batch, epoch if announced or number else None, number))
            self._lanes.add(task)
        if starts:
            rt.emit(ev.STARTS, self.worker_id, *starts)

    def _announce_batch(self, lane: int, batch: list[WorkItem]) -> int:
        """Tell the supervisor the items ``lane`` will run, in order (BATCH events); their board number."""
        self._batches = self._batches % (BATCH_LIMIT - 1) + 1  # never 0: a slot never written reads 0
        name = f"{self.worker_id}#{lane}"
        offset = 0
        for chunk in _event_lines(batch, lambda item: _id_width(item.id) + 22):  # 22: the token
            self.rt.emit(ev.BATCH, name, self._batches, offset, *(part for i in chunk for part in (i.id, i.token)))
            offset += len(chunk)
        return self._batches

    async def _lane(self, lane: int, items: list[WorkItem], announced: int | None = None, number: int = 0) -> None:
        """Run a claimed batch in order, in lane ``lane`` (START events name it ``<worker id>#<lane>``).

        One coroutine for the lane and its batch (not one calling the other): every
        item in flight holds its lane's frames, so each level costs memory per item.
        ``announced``: the batch's first item was announced by ``_start_lanes`` (STARTS),
        or the whole batch was (BATCH, numbered ``number`` on the lane board), when the
        isolation gate had let this many items run alone.
        """
        name = f"{self.worker_id}#{lane}"
        me = asyncio.current_task()  # once per lane, not per item (a Python function before 3.12)
        handler_seconds = 0.0  # what the handlers took (their own calls, not the lane's waits)
        ran = 0
        owner = self.worker_id  # re-registered under a new id: what is left of the batch was given back
        # A plain-function handler with no keys to lease runs several items per trip to the
        # thread pool (see _run_in_thread); every other case runs one item at a time.
        # With --timeout (or an item's own timeout) each item runs on its own, so that the clock runs per item.
        in_thread = (
            not self.rt.handler.is_async
            and not self.rt.keys.active
            and self.rt.options.timeout is None
            and all(item.timeout is None for item in items)
        )
        index = 0
        rt = self.rt
        try:
            try:
                while index < len(items):
                    # On shutdown or after being reaped, unstarted items of the batch stay
                    # claimed: deregistration (or the reaper) puts them back, attempts refunded.
                    if self.rt.stopping or self.lost or self.worker_id != owner:
                        break
                    if self.health.pause_due:
                        # Do not sit on claims through a pause: others can run them meanwhile.
                        for rest in items[index:]:
                            await self._release(rest, delay=0.0)
                        break
                    if number and announced != rt.gate.exclusive_runs:
                        number = 0  # an item ran alone since the batch was announced: a START each from here on
                    if in_thread and items[index].releases == 0:
                        count, took = await self._run_in_thread(items, index, name, (lane, number, announced))
                    else:
                        slot = (lane, number, index) if number else None
                        took = await self._run_one(items[index], name, announced, me, slot)
                        count = 1
                    handler_seconds += took
                    ran += count
                    index += count
                    if (
                        self._acks
                        and (not self._flushes or len(self._acks) >= ACK_BATCH_MAX)
                        and time.monotonic() - self._oldest_ack >= ACK_FLUSH_SECONDS
                    ):
                        # On their way while the batch runs on (see the end of the lane). One such call
                        # at a time unless ACK_BATCH_MAX are waiting: a slow store does not get a new
                        # call every ACK_FLUSH_SECONDS while the earlier ones are still unanswered.
                        self._start_flush()
            finally:
                if self._acks:
                    if (
                        len(self._lanes) > 1
                        and not self.rt.stopping
                        and len(self._acks) < ACK_BATCH_MAX
                        and time.monotonic() - self._oldest_ack < ACK_FLUSH_SECONDS
                    ):
                        # Other lanes are running: their completions share the call (within ACK_FLUSH_SECONDS).
                        self._flush_later()
                    else:
                        # Sent now, as a task of its own that the lane does not wait for: the lane comes
                        # free at once, so the next claim travels while these completions do (a fast
                        # handler's batch was claim, run, complete, one round trip after the other).
                        # A lane cancelled at the end of the grace period does not cancel the send, and
                        # settle_before_exit waits for it before deregistering; one storage did not
                        # answer is kept to be sent again before the next claim after it (_defer).
                        self._start_flush()
            if self._adaptive and ran:
                # Judged by the handlers' own time per item, not the lane's: with many lanes the
                # lane's wall time is the other lanes' too (and its completions' round trip), so
                # fast handlers looked slow and each item kept a lane (a task) of its own.
                per_item = handler_seconds / ran
                if self.health.consecutive_failures:
                    self.claim_size = 1
                elif per_item >= INSTANT_HANDLER_SECONDS:
                    # As many as take LANE_BATCH_SECONDS: down to that at once (a slow call
                    # keeps one claim at a time), up by doubling while whole batches come back.
                    fits = max(1, min(self._max_lane_batch, int(LANE_BATCH_SECONDS / per_item)))
                    if self.claim_size > fits:
                        self.claim_size = fits
                    elif len(items) == self.claim_size:
                        self.claim_size = min(fits, self.claim_size * 2)
                elif len(items) == self.claim_size:
                    self.claim_size = min(self._instant_max, self.claim_size * 2)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug in the runtime, not a handler's: the process stops, as it did
            log.error("worker %s: lane %d crashed: %r", self.worker_id, lane, exc)
            if self._crashed is None:
                self._crashed = exc
        finally:
            self.items_in_flight -= len(items)
            self._lanes.discard(me)  # type: ignore[arg-type]
            self._free_lanes.append(lane)
            if len(self._free_lanes) >= self._wake_at_free or self._crashed is not None:
                self._lane_freed.set()

    async def _wait_for_lane(self, timeout: float | None, *, until_free: int = 1) -> None:
        """Wait for lanes to end, or for the process to stop.

        Without ``timeout``: until one lane ends. With it: until ``until_free`` lanes
        are free, or ``timeout`` seconds have passed.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not (self.rt.stopping or self._crashed is not None):
            left = None if deadline is None else deadline - loop.time()
            if left is not None and (left <= 0 or len(self._free_lanes) >= until_free):
                return
            self._lane_freed.clear()
            # Woken once enough lanes are free, not by every lane that ends (hundreds per claim at
            # high concurrency, each a wake-up with two futures made); a lane that crashed or the
            # process stopping still wakes it (the deadline bounds the rest).
            self._wake_at_free = 1 if deadline is None else until_free
            freed = asyncio.ensure_future(self._lane_freed.wait())
            stop = asyncio.ensure_future(self.rt.stop_event.wait())
            try:
                await asyncio.wait({freed, stop}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                freed.cancel()
                stop.cancel()
            if timeout is None:
                return

    def _storage_fault(self, action: str, exc: WorkhiveError) -> bool:
        """Count a failed storage call; True (and the process stops) once the fault has lasted.

        The count resets only when an item finishes (or a claim finds the pool empty): a store
        that takes small claims but refuses every completion (a full disk) still ends the run.
        """
        self.storage_faults += 1
        (log.warning if self.storage_faults == 1 else log.debug)(
            "worker %s: %s failed (%d storage failures in a row): %s", self.worker_id, action, self.storage_faults, exc
        )
        if isinstance(exc, StorageCorrupt) or self.storage_faults >= MAX_STORAGE_FAULTS:
            self.rt.storage_failed(exc, self.storage_faults)
            return True
        return False

    def report_in_flight(self) -> None:
        """At a heartbeat: a busy worker's registry detail says how many items it has in flight, when that changed."""
        if self._last_status is WorkerStatus.BUSY and self.items_in_flight != self._reported_in_flight:
            self._status(WorkerStatus.BUSY, f"{self.items_in_flight} in flight")

    def _status(self, status: WorkerStatus, detail: str | None) -> None:
        """Record ``status`` in the registry soon, in order, without holding up the caller."""
        if self._deregistering:
            return
        self._last_status = status
        self._reported_in_flight = self.items_in_flight if status is WorkerStatus.BUSY and detail else None
        self._status_wanted = (status, detail)
        if self._status_writer is None or self._status_writer.done():
            self._status_writer = asyncio.get_running_loop().create_task(self._write_status())

    async def _write_status(self) -> None:
        # One writer per worker, always sending the latest wish: updates never overtake each other.
        while self._status_wanted is not None:
            (status, detail), self._status_wanted = self._status_wanted, None
            try:
                await self.rt.hive.workers.update_status(self.worker_id, status, detail)
            except WorkhiveError as exc:  # informational only; never stop work for it
                log.debug("worker %s: status update failed: %s", self.worker_id, exc)

    def _start_flush(self) -> asyncio.Future[None]:
        """Send the waiting completions now, as a task of its own that ``settle_before_exit`` waits for."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._flush_queued is not None:
            # One already made that has not run yet takes every completion waiting when it does:
            # a lane whose items never yield (a no-op handler) asked for one per item once due.
            return self._flush_queued
        flush = self._flush_queued = asyncio.ensure_future(self._flush_acks())
        self._flushes.add(flush)
        flush.add_done_callback(self._flush_ended)
        return flush

    def _flush_ended(self, flush: asyncio.Future[None]) -> None:
        self._flushes.discard(flush)
        if self._flush_queued is flush:  # cancelled before it ran: the completions are still waiting
            self._flush_queued = None
        if not flush.cancelled() and flush.exception() is not None:
            # _complete turns storage errors into settlements to send again; anything else is a bug.
            log.error("worker %s: sending completions crashed: %r", self.worker_id, flush.exception())

    def _flush_later(self) -> None:
        """Send the waiting completions once the oldest is ACK_FLUSH_SECONDS old (one timer at a time)."""
        if self._flush_timer is None:
            delay = max(0.0, self._oldest_ack + ACK_FLUSH_SECONDS - time.monotonic())
            self._flush_timer = asyncio.get_running_loop().call_later(delay, self._flush_due)

    def _flush_due(self) -> None:
        self._flush_timer = None
        if self._acks:
            self._start_flush()

    async def _flush_acks(self) -> None:
        self._flush_queued = None
        acks, self._acks = self._acks, []
        if acks:
            await self._complete(acks)

    async def _complete(self, acks: list[tuple[WorkItem, Any]], *, resent: bool = False) -> None:
        """Complete claims in one ``complete_many``; ``resent``: each was sent before, with no answer."""
        try:
            accepted = await self.rt.pool.complete_many(acks)
        except InvalidArgument as exc:
            await self._refused_results(acks, exc, resent=resent)
            return
        except WorkhiveError as exc:
            kept = [Settlement(Kind.COMPLETE, item, result) for item, result in acks]
            self._defer(kept, f"completing {len(acks)} item(s)", exc)
            return
        except asyncio.CancelledError:
            self.unsettled.extend(Settlement(Kind.COMPLETE, item, result) for item, result in acks)
            raise
        done = [item.id for (item, _), ok in zip(acks, accepted) if ok]
        lost: list[str] = []
        if len(done) != len(acks):
            for (item, result), ok in zip(acks, accepted):
                if ok:
                    continue
                if not resent:
                    lost.append(item.id)
                    continue
                # A repeat of a completion that was applied is refused just like a lost claim: the item
                # as it is now tells which, so that an applied one is counted once.
                settlement = Settlement(Kind.COMPLETE, item, result)
                try:
                    current: WorkItem | None = await self.rt.pool.get(item.id)
                except ItemNotFound:
                    current = None
                except WorkhiveError as exc:
                    self._defer([settlement], f"reading item {item.id} back after its completion", exc)
                    continue
                if earlier_send_applied(settlement, current):
                    await announce(self.rt.hive, self.rt.pool.name, settlement, current)  # type: ignore[arg-type]
                    done.append(item.id)
                else:
                    lost.append(item.id)
        if done or lost:
            # Storage answered for these for good. (Not for a refused repeat it could not read back:
            # were that to reset the count, a read that keeps failing would be retried forever.)
            self.storage_faults = 0
        if done:
            # With the ids: if this process dies now, the supervisor knows which were counted.
            self._emit_done(done)
            # Completions free slots: a claim that came back empty because a group or the pool was at
            # its limit can take more now. Backends do not wake waiters for a completion, so an idle
            # claim loop would otherwise sleep out its wait (a second with wake-ups) at every limit.
            self._kick.set()
        if lost:
            log.info(
                "worker %s: completion of %s refused: the lease was lost (expired or reaped); another claim owns it",
                self.worker_id,
                ", ".join(lost),
            )

    def _emit_done(self, done: list[str]) -> None:
        """DONE events for ``done``, as many as it takes for each line to stay whole (events.PipeSink).

        One event for a whole ``complete_many`` (up to a claim's worth of ids) was longer than a
        pipe write may be, and the sink cut its ids to one string: the supervisor then never heard
        which claims ended (its record of them grew with every item, and a process that died
        later had all of them read back and counted once more).
        """
        for chunk in _event_lines(done, _id_width):
            self.rt.emit(ev.DONE, len(chunk), *chunk)

    async def _refused_results(self, acks: list[tuple[WorkItem, Any]], exc: InvalidArgument, *, resent: bool) -> None:
        """Storage refused a value before writing anything (a result too large for it): fail that item, with why.

        One refused result refuses the whole call, so a batch is sent again one
        completion at a time: the others complete.
        """
        if len(acks) > 1:
            for ack in acks:
                await self._complete([ack], resent=resent)
            return
        item, _ = acks[0]
        log.warning("worker %s: storage refused the result of item %s: %s", self.worker_id, item.id, exc)
        self.health.failure()
        await self._fail(item, exc)

    # -- one item -----------------------------------------------------------
    async def _run_one(
        self,
        item: WorkItem,
        lane: str,
        announced: int | None = None,
        task: asyncio.Task[Any] | None = None,
        slot: tuple[int, int, int] | None = None,
    ) -> float:
        """Run one claimed item: its key, its handler, its settlement. Returns the seconds its handler took.

        One coroutine from the lane down to the handler when the handler is async and
        has no clock to run (a waiting item holds every frame above it; see _lane).
        ``announced``: the supervisor heard of this claim already (STARTS, or BATCH),
        when the isolation gate had let this many items run alone. ``task``: the lane's
        task, this one. ``slot``: (lane, batch number, index) to write to the lane board.
        """
        rt = self.rt
        # An item that was running when its process died beside others runs alone here, so
        # that if it is the one that kills processes, the next death names it (see isolation).
        async with rt.suspects.admit(rt.gate, item) as alone:
            # Tell the supervisor which claim is running: if this process dies, only the
            # items running then are in question; the rest of the batch is refunded.
            # ``alone`` tells the supervisor nothing else runs in this process until it ends.
            # An item announced in a STARTS event says so again only if an item ran alone since
            # (it waited at the gate meanwhile): its START ends the supervisor's record of that one.
            if slot is not None and not alone and announced == rt.gate.exclusive_runs:
                rt.board.write(*slot)  # type: ignore[union-attr]  # a slot comes with a board
            elif announced is None or alone or announced != rt.gate.exclusive_runs:
                rt.emit(ev.START, lane, item.id, item.token, 1 if alone else 0)
            with tracing.handling(rt.pool.name, item, self.worker_id):  # the item's trace goes on here
                keys = rt.keys
                try:
                    # Without keys every item shares the one no_key (take and give_back do nothing for it).
                    key = await keys.take(item) if keys.active else keys.no_key
                except InvalidArgument as exc:
                    # The handler's token estimate is not a number, or can never fit the key's
                    # budget (BudgetUnsatisfiable): no retry can help this item.
                    log.warning("worker %s: item %s: %s", self.worker_id, item.id, exc)
                    await self._fail(item, exc, poison=True)
                    return 0.0
                except NoCredentialAvailable as exc:
                    # Every key is cooling down or disabled: hand the item back unspent and let
                    # the process decide whether the fleet can go on at all.
                    log.warning("worker %s: no credential available: %s", self.worker_id, exc)
                    next_at = getattr(exc, "next_available_at", None)
                    delay = 1.0 if next_at is None else max(0.0, min(60.0, next_at - time.time()))
                    await self._release(item, delay=delay)
                    rt.no_credentials(exc)
                    return 0.0
                try:  # the key goes back (and its budget gets the tokens reported) however the block ends
                    if rt.stopping and key.credential is not None:
                        # Stopped while waiting for budget: the call was never made; give the item back unspent.
                        await self._release(item, delay=0.0)
                        return 0.0
                    ctx = self._context(item, key.credential)
                    started = time.perf_counter()
                    took = 0.0
                    try:
                        try:
                            try:
                                if rt.handler.is_async and item.timeout is None and rt.options.timeout is None:
                                    # No clock to run: the handler runs in this lane's own task (no task
                                    # and asyncio.wait of its own); cancel_running cancels the lane,
                                    # which is inside the handler whenever the item is in ``running``.
                                    running = self.running[item.id] = _Running(item, ctx)
                                    running.task = task if task is not None else asyncio.current_task()
                                    try:
                                        result = await rt.handler.function(ctx)
                                    except asyncio.CancelledError:
                                        if item.id not in self.cancelled or self._lanes_cancelled:
                                            raise  # the process's grace ran out: the lane ends, the item goes back
                                        _uncancel(running.task)
                                        raise _CancelledByHive(f"item {item.id} was cancelled") from None
                                    finally:
                                        self.running.pop(item.id, None)
                                        if ctx._progress is not None:
                                            self.ended_contexts[item.id] = ctx
                                else:
                                    result = await self._call_handler(item, ctx)
                            finally:
                                took = time.perf_counter() - started
                                if rt.metrics is not None:
                                    rt.metrics.observe_handler(rt.pool.name, took)
                        except Exception as exc:
                            await self._settle(item, exc, None, key)
                        except asyncio.CancelledError:
                            raise
                        except BaseException as exc:  # SystemExit, KeyboardInterrupt…: the handler ends its process
                            await self._ended_process(item, exc)
                        else:
                            await self._settle(item, None, result, key)
                    finally:
                        key.usage = ctx.usage
                        if ctx.usage and item.group is not None:  # (charge does nothing otherwise)
                            # After the settle: an item already running when its group's budget runs out finishes.
                            await rt.group_budgets.charge(item.group, ctx.usage)
                    return took
                finally:
                    if key is not keys.no_key:
                        await keys.give_back(key)

    async def _call_handler(self, item: WorkItem, ctx: HandlerContext) -> Any:
        """Run the handler for ``item``, where ``cancel_running`` can reach it.

        An async handler runs as its own task, awaited through ``asyncio.wait``: a
        cancellation of this worker (the grace period's end) cancels it as before, while
        ``cancel_running`` cancels only the handler's task, which ends as ``_CancelledByHive``.
        """
        rt = self.rt
        running = self.running[item.id] = _Running(item, ctx)
        # The item's own timeout (push(..., timeout=)) wins over the fleet's --timeout.
        timeout = item.timeout if item.timeout is not None else rt.options.timeout
        try:
            if not rt.handler.is_async and timeout is None:
                return await rt.handler(ctx, rt.executor)
            # (An async handler without a clock runs in _run_one itself.)
            task = asyncio.ensure_future(_outcome(rt.handler(ctx, rt.executor)))
            if rt.handler.is_async:
                running.task = task  # a sync handler's thread cannot be cancelled: it sees ctx.cancelled
            try:
                done, _ = await asyncio.wait({task}, timeout=timeout)
            except asyncio.CancelledError:
                task.cancel()
                raise
            if not done:
                assert timeout is not None
                await self._timed_out(item, ctx, task, timeout)
            if task.cancelled() and item.id in self.cancelled:
                raise _CancelledByHive(f"item {item.id} was cancelled")
            result, raised = task.result()
            if raised is not None:
                raise raised  # here, in the worker's own task, as when the handler was awaited directly
            return result
        finally:
            self.running.pop(item.id, None)
            if ctx._progress is not None:
                self.ended_contexts[item.id] = ctx

    async def _timed_out(self, item: WorkItem, ctx: HandlerContext, task: asyncio.Future[Any], timeout: float) -> None:
        """The handler ran past ``--timeout``: stop it, and raise ``TimedOut`` (the item fails, retried or poisoned).

        An async handler's task is cancelled; a sync handler cannot be, so it sees
        ``ctx.cancelled`` and gets the ``grace`` period to return. One that does not is
        stuck in a thread for good: the process stops to be replaced (the other items
        in flight finish within the grace or go back unspent, as on SIGTERM).
        """
        rt = self.rt
        ctx._cancelled_by_hive()
        if rt.handler.is_async:
            task.cancel()
        try:
            done, _ = await asyncio.wait({task}, timeout=rt.options.grace)
        except asyncio.CancelledError:
            task.cancel()
            raise
        text = f"timed out after {timeout:g} s"
        if not done:
            if not rt.handler.is_async:
                rt.handler_ended_process(
                    f"item {item.id} {text} and its sync handler did not return within the {rt.options.grace:g} s grace"
                )
            text += " (the handler did not stop; its worker process is replaced)"
        raise TimedOut(text)

    def cancel_running(self, item_id: str) -> bool:
        """The item was cancelled in storage: stop its handler (task cancelled, ``ctx.cancelled`` true).

        Its outcome is then not settled: storage already holds it CANCELLED, and
        would refuse the completion anyway. False if it no longer runs here.
        """
        running = self.running.get(item_id)
        if running is None:
            return False
        self.cancelled.add(item_id)
        running.ctx._cancelled_by_hive()
        if running.task is not None:
            running.task.cancel()
        return True

    async def write_progress(self, item: WorkItem, ctx: HandlerContext) -> None:
        """Write the handler's latest ``ctx.progress`` for ``item``, if it reported one since the last write.

        Called at each heartbeat for the running items (so at most one write per item and
        beat) and once when the handler ends (so the last value is always written).
        Progress is informational: a failed write is logged, never fatal.
        """
        value = ctx._take_progress()
        if value is None:
            return
        try:
            await write_progress(self.rt.hive, self.rt.pool.name, item.id, item.token, value)
        except WorkhiveError as exc:
            log.debug("worker %s: writing the progress of %s failed: %s", self.worker_id, item.id, exc)

    async def _count_cancelled(self) -> bool:
        """Read how many items of the pool are cancelled; True if that changed since the last read (or is unknown)."""
        try:
            count = (await self.rt.pool.stats()).cancelled
        except WorkhiveError as exc:
            log.debug("worker %s: counting cancelled items: %s", self.worker_id, exc)
            self._cancelled_count = None
            return True
        changed = count != self._cancelled_count
        self._cancelled_count = count
        return changed

    async def check_cancelled(self) -> None:
        """At each heartbeat: stop the running claims cancelled in storage.

        One count of the pool's cancelled items tells whether any was cancelled since
        the last beat; only then are the running claims read back, one by one. (A
        cancel and a purge or requeue of as many cancelled items within one beat hide
        each other: that handler runs on, and its settlement is refused, as a lost claim's.)
        """
        if not await self._count_cancelled():
            return
        for item_id, running in list(self.running.items()):
            try:
                current = await self.rt.hive.storage.get(self.rt.pool.name, item_id)
            except WorkhiveError as exc:  # the next beat looks again
                log.debug("worker %s: reading item %s back for cancellation: %s", self.worker_id, item_id, exc)
                self._cancelled_count = None
                return
            if (
                current is not None
                and current.state is ItemState.CANCELLED
                and current.token == running.item.token
                and self.running.get(item_id) is running
            ):
                log.info("worker %s: item %s was cancelled; stopping its handler", self.worker_id, item_id)
                self.cancel_running(item_id)

    def _context(
        self, item: WorkItem, credential: Credential | None = None, loop: asyncio.AbstractEventLoop | None = None
    ) -> HandlerContext:
        rt = self.rt
        tracing.credential(credential)
        return HandlerContext(
            item=item,
            pool=rt.pool,
            hive=rt.hive,
            worker_id=self.worker_id,
            credential=credential,
            logger=rt.handler_logger,
            loop=loop,  # built in a thread: the loop its steps go through (ctx.step)
        )

    async def _settle(self, item: WorkItem, exc: Exception | None, result: Any, key: KeyUse | None = None) -> None:
        """Turn what the handler did with ``item`` (raised ``exc``, or returned ``result``) into storage calls.

        ``key``: the key the call was made with, told the outcome (None: the fleet has no keys).
        """
        key = key if key is not None else self.rt.keys.no_key
        tracing.outcome(exc)
        ended = self.ended_contexts.pop(item.id, None)
        if ended is not None:
            await self.write_progress(item, ended)  # the handler's last progress, whatever the outcome
        if item.id in self.cancelled:
            # Cancelled while it ran: storage holds it CANCELLED and refuses any settlement.
            self.cancelled.discard(item.id)
            self.rt.emit(ev.CANCELLED, 1, item.id)
            return
        if isinstance(exc, RateLimited):
            await self._rate_limited(item, key, exc)
        elif isinstance(exc, AuthFailed):
            await self._auth_failed(item, key, exc)
        elif isinstance(exc, Permanent):
            await self._fail(item, exc, poison=True)
        elif exc is not None:
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
                except InvalidItem as bad:
                    self.health.failure()
                    await self._fail(item, bad)
                    return
            if key is not self.rt.keys.no_key:  # the shared no_key holds nothing an OK would tell
                await key.report(Outcome.OK)
            self.health.success()
            if not self._acks:
                self._oldest_ack = time.monotonic()
            self._acks.append((item, result))

    async def _run_in_thread(
        self, items: list[WorkItem], start: int, lane: str, board: tuple[int, int, int | None] = (0, 0, None)
    ) -> tuple[int, float]:
        """Run ``items[start]`` and, while they are quick, the items after it, in one trip to the thread pool.

        For a plain-function handler each item used to cost two thread hand-offs (there
        and back), more than a fast handler's own work. Here the thread runs items one
        after another, each announced (START) before its call exactly as ``_run_one``
        does, and stops after ACK_FLUSH_SECONDS, at the first exception, at an item that
        must be looked at first (a released one may be a crash suspect, to run alone),
        or when the process stops or an item waits to run alone. The loop then settles
        each outcome in order. Returns how many items ran, and the seconds their calls took.
        ``board``: (lane, batch number, the gate's count as it was announced) of a batch on the
        lane board (runtime.board), whose items are written there instead; number 0: none.
        """
        rt = self.rt
        loop = self._loop = asyncio.get_running_loop()
        async with rt.gate.shared():
            # Nothing runs alone during the trip (it holds the gate's shared side): only an item that
            # ran alone before it (while this lane waited to enter) ends the board's use for the batch.
            slot = board[:2] if board[1] and board[2] == rt.gate.exclusive_runs else None
            ran: list[tuple[WorkItem, Any, BaseException | None, float]] = await loop.run_in_executor(
                rt.executor, self._call_in_thread, items, start, lane, slot
            )
        for item, result, exc, elapsed in ran:
            if rt.metrics is not None:
                rt.metrics.observe_handler(rt.pool.name, elapsed)
            if result is not None and inspect.isawaitable(result):  # a coroutine a plain function returned
                try:
                    result = await result
                except asyncio.CancelledError:
                    raise
                except BaseException as raised:
                    exc, result = raised, None
            if exc is not None and not isinstance(exc, Exception):
                # SystemExit, KeyboardInterrupt…: the handler ends its process. It is the last item
                # of the trip (the thread stops at an exception), after the ones before it settled.
                await self._ended_process(item, exc)
                break
            await self._settle(item, exc, result)  # type: ignore[arg-type]
        if self.thread_usage:  # after the settles: items already running when a budget runs out finish
            for item, *_ in ran:
                await rt.group_budgets.charge(item.group, self.thread_usage.pop(item.id, None))
        return len(ran), sum(elapsed for *_, elapsed in ran)

    async def _ended_process(self, item: WorkItem, exc: BaseException) -> None:
        """The handler raised what ends a process (``SystemExit``, ``KeyboardInterrupt``…) running ``item``.

        The item is known to be the one, so it spends its attempt here, as an item
        that killed its process running alone would, and is poisoned after
        ``max_attempts``; its error says how the process ended (scrubbed, like every
        stored error). Then the process stops, first, so that nothing new starts:
        the other items in flight finish or go back unspent, and the supervisor
        starts a replacement.
        """
        tracing.outcome(exc)
        detail = str(exc)
        text = f"its worker process exited with {type(exc).__name__}" + (f": {detail}" if detail else "")
        self.rt.handler_ended_process(f"the handler raised {type(exc).__name__} on item {item.id}")
        await self._fail(item, text)

    def _call_in_thread(
        self, items: list[WorkItem], start: int, lane: str, slot: tuple[int, int] | None = None
    ) -> list[tuple[WorkItem, Any, BaseException | None, float]]:
        # Runs in the thread pool: reads the stop flags, never touches the event loop itself (a sync
        # ctx.step hands its storage calls to ``self._loop`` and waits, while the loop awaits this trip).
        rt = self.rt
        loop = self._loop
        function = rt.handler.function
        ran: list[tuple[WorkItem, Any, BaseException | None, float]] = []
        until = time.monotonic() + ACK_FLUSH_SECONDS
        board = rt.board if slot is not None else None
        for index in range(start, len(items)):
            item = items[index]
            if ran and (
                rt.stopping or self.lost or item.releases or rt.gate.exclusive_wanted or time.monotonic() >= until
            ):
                break
            if board is not None:
                board.write(slot[0], slot[1], index)  # type: ignore[index]
            else:
                rt.emit(ev.START, lane, item.id, item.token, 0)
            started = time.perf_counter()
            ctx = self._context(item, loop=loop)
            self.running[item.id] = _Running(item, ctx)  # the heartbeat may cancel it (ctx.cancelled)
            try:
                with tracing.handling(rt.pool.name, item, self.worker_id, default="ok"):
                    result = function(ctx)
            except BaseException as exc:
                ran.append((item, None, exc, time.perf_counter() - started))
                break
            finally:
                self.running.pop(item.id, None)
                if ctx._progress is not None:
                    self.ended_contexts[item.id] = ctx  # a dict store: safe from this thread (the GIL)
                if ctx.usage:
                    self.thread_usage[item.id] = ctx.usage
            ran.append((item, result, None, time.perf_counter() - started))
            if result is not None and inspect.isawaitable(result):  # (None: no ABC check per item)
                break  # awaited on the loop before anything else runs
        return ran

    async def _rate_limited(self, item: WorkItem, key: KeyUse, exc: RateLimited) -> None:
        rt = self.rt
        retry_after: float | None = exc.retry_after  # type: ignore[attr-defined]
        await key.report(Outcome.RATE_LIMITED, retry_after=retry_after)
        if item.releases >= rt.options.max_rate_limit_retries:
            await self._fail(
                item, f"rate limited {item.releases + 1} times in a row (last: {exc})", retry_after=retry_after
            )
            return
        if key.credential is not None:
            # The cooldown lives on the key, fleet-wide: the item can go at once with another key
            # (acquire waits while every key cools down).
            delay = 0.0
        else:
            delay = rt.hive.backoff.delay(item.releases + 1, retry_after)
        await self._release(item, delay=delay)

    async def _auth_failed(self, item: WorkItem, key: KeyUse, exc: AuthFailed) -> None:
        rt = self.rt
        if key.credential is None:
            self.health.failure()
            await self._fail(item, exc)
            return
        await key.report(Outcome.AUTH_FAILED, reason=exc.reason or str(exc))  # type: ignore[attr-defined]
        if item.releases >= rt.options.max_rate_limit_retries:
            await self._fail(item, f"credentials refused {item.releases + 1} times (last: {exc})")
        else:
            await self._release(item, delay=0.0)

    async def _release(self, item: WorkItem, *, delay: float) -> None:
        await self._send_release(Settlement(Kind.RELEASE, item, delay=delay))

    async def _send_release(self, settlement: Settlement, *, resent: bool = False) -> None:
        try:
            await self.rt.pool.release(settlement.item, delay=settlement.delay)
        except LeaseLost as exc:
            if not await self._applied_unseen(settlement, exc, resent):
                return
        except WorkhiveError as exc:
            self._defer([settlement], settlement.action, exc)
            return
        except asyncio.CancelledError:
            self.unsettled.append(settlement)
            raise
        self.storage_faults = 0
        self._kick.set()  # a freed slot (see _complete)
        self.rt.emit(ev.RELEASED, 1)
        if self.rt.metrics is not None:
            self.rt.metrics.observe_released(self.rt.pool.name)

    async def _fail(
        self, item: WorkItem, error: BaseException | str, *, poison: bool = False, retry_after: float | None = None
    ) -> None:
        # --max-attempts applies to what this fleet claims, whatever budget the item was pushed with.
        capped = not poison and item.attempts >= self.rt.options.max_attempts < item.max_attempts
        text = error_text(error)
        if capped:
            text += f" (poisoned after {item.attempts} attempts: the fleet's max_attempts)"
        await self._send_fail(Settlement(Kind.FAIL, item, error=text, poison=poison or capped, retry_after=retry_after))

    async def _send_fail(self, settlement: Settlement, *, resent: bool = False) -> None:
        item = settlement.item
        try:
            state = await self.rt.pool.fail(
                item, settlement.error, poison=settlement.poison, retry_after=settlement.retry_after
            )
        except LeaseLost as exc:
            if not await self._applied_unseen(settlement, exc, resent):
                return
            state = exc.current.state  # type: ignore[attr-defined]
        except WorkhiveError as exc:
            self._defer([settlement], settlement.action, exc)
            return
        except asyncio.CancelledError:
            self.unsettled.append(settlement)
            raise
        self.storage_faults = 0
        self._kick.set()  # a freed slot (see _complete)
        if state is not ItemState.POISONED:
            self.rt.counts.retry()
        # The last error of each failing item goes to the supervisor's progress display.
        self.rt.emit(ev.POISONED if state is ItemState.POISONED else ev.FAILED, 1, item.id, settlement.error[:300])

    async def _applied_unseen(self, settlement: Settlement, exc: LeaseLost, resent: bool) -> bool:
        """After ``LeaseLost``: True if it refused a repeat of a send that was applied (its hook is fired now).

        Otherwise the claim was lost (expired, reaped, taken over): logged, and the item dropped.
        """
        current = getattr(exc, "current", None)
        if resent and earlier_send_applied(settlement, current):
            await announce(self.rt.hive, self.rt.pool.name, settlement, current)  # type: ignore[arg-type]
            return True
        log.info("worker %s: %s", self.worker_id, exc)
        return False
