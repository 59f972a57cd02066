"""A worker process that died without a word: which item is to blame, and where its claims go.

A process that ends on its own says so in its last event (``EXIT``, after its
workers deregistered and gave their claims back unspent): nothing here
applies to it. One that dies without it (a handler's ``os._exit``, a signal, a
segfault in a C extension, the OOM killer) leaves its workers' claims behind.
They are released at once rather than left for the reaper, and the item that
took the process down is charged:

* an item that ran alone in the dead process (the only claim running there,
  or one started alone as a crash suspect) spends its attempt: it is the
  culprit, or was there when something else killed the process. After
  ``max_attempts`` it is poisoned, its error saying how the process ended
  ("killed by signal 11 (SIGSEGV)");
* when several ran, none does: each is marked a suspect and runs alone from
  then on (``runtime.isolation``), so innocents are not poisoned beside a
  killer;
* a process the supervisor stopped itself (a second signal, the stop deadline)
  or that had announced a fault (storage failing) is no item's fault:
  everything it held goes back unspent.

Every storage call here waits within a ``WaitBudget`` (``runtime.patience``):
a dead store costs its retry window once, not once per call. When what the
process was running cannot be read, no item is blamed: the claims come back
when their leases expire (which keeps the attempt each claim took).
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from workhive.errors import WorkhiveError
from workhive.hive import Hive
from workhive.models import ItemState, WorkerStatus
from workhive.pool import error_text
from workhive.runtime import events as ev
from workhive.runtime.isolation import SUSPECT_TTL, SUSPECTS, suspect_key
from workhive.runtime.options import FleetOptions
from workhive.runtime.patience import WaitBudget

__all__ = ["Aftermath", "how_it_ended"]

log = logging.getLogger("workhive.runtime.supervisor")


def how_it_ended(code: int) -> str:
    """How a process with exit status ``code`` (``Popen.returncode``: negative for a signal) ended.

    >>> how_it_ended(-11)
    'killed by signal 11 (SIGSEGV)'
    >>> how_it_ended(3)
    'exit status 3'
    """
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        return f"killed by signal {-code} ({name})"
    return f"exit status {code}"


class Aftermath:
    """Settles what dead worker processes held; counts what it put back and what it could not.

    ``child`` is the supervisor's record of a process: ``proc`` (its ``Popen``),
    ``worker_ids``, ``running`` (lane -> the claim it last started; a lane is one of a worker's
    ``concurrency`` tasks, named ``<worker id>#<n>`` in START events),
    ``alone`` (the claim last started alone), ``unreported`` (claims started
    whose outcome it never reported), ``stopped_by_us`` and ``fatal``.
    """

    def __init__(self, hive: Hive, options: FleetOptions, tally: ev.Tally) -> None:
        self.hive = hive
        self.options = options
        self.tally = tally
        self.put_back = 0  # claims given back unspent from processes the supervisor stopped
        self.left_to_expire = 0  # workers whose claims could not be given back: they expire with their lease
        self.lost_with_process = 0  # workers of processes that died on their own
        self._attempts: dict[str, int] = {}  # item id -> its attempts, read for the claims of a dead child

    async def settle(self, child: Any, code: int, budget: WaitBudget) -> None:
        """Judge and release the claims of ``child``, which died (exit status ``code``) without an ``EXIT`` event."""
        # Stopped by us, or dying after it announced that it stops (storage failing, every key
        # disabled): whatever ran there did not kill it.
        blameless = child.stopped_by_us or child.fatal is not None
        if child.unreported:
            await self.count_unreported(child, budget)
        running = None if blameless else await self._running_at_death(child, budget)
        if running:
            if child.alone is not None and child.alone in running:
                running = [child.alone]  # it ran alone: the others had finished, whatever storage says
            if len(running) == 1:
                await self._spend_attempt(child, code, running[0], budget)
            else:
                await self._suspect(child, code, running, budget)
        self._attempts.clear()
        await self._release(child, code, budget, put_back=child.stopped_by_us)
        if not child.stopped_by_us:
            self.lost_with_process += len(child.worker_ids)

    async def count_unreported(self, child: Any, budget: WaitBudget) -> None:
        """Outcomes the dead child committed but died before reporting: DONE or POISONED under its token.

        A process can die between committing a batch of completions and telling the
        supervisor (a handler's ``os._exit`` in another thread, a SIGKILL); counting them
        here keeps the report in agreement with storage.
        """
        for item_id, token in list(child.unreported.items()):
            try:
                item = await budget.call(
                    "reading an item of a dead worker", self.hive.storage.get(self.options.pool, item_id)
                )
            except WorkhiveError as exc:
                log.debug("reading item %s of a dead worker failed: %s", item_id, exc)
                continue
            if item is None or item.token != token:
                continue
            if item.state is ItemState.DONE:
                self.tally.done += 1
            elif item.state is ItemState.POISONED:
                # Poisoned by the child itself (its event lost with the process), before it died;
                # a claim the supervisor charges below is still CLAIMED here, so none counts twice.
                self.tally.poisoned += 1
        child.unreported.clear()

    async def _running_at_death(self, child: Any, budget: WaitBudget) -> list[tuple[str, int]] | None:
        """The claims the dead child was running (started there, still claimed under that token); None: unknown."""
        found: list[tuple[str, int]] = []
        for started in list(child.running.values()):
            try:
                item = await budget.call(
                    "reading an item of a dead worker", self.hive.storage.get(self.options.pool, started[0])
                )
            except WorkhiveError as exc:
                # Blaming on a guess would poison innocents, or mark them suspects, for a fault of
                # the store: none is charged, and the leases' expiry keeps the attempts they took.
                log.warning(
                    "cannot tell what worker process %d was running when it died (%s); no item is blamed",
                    child.proc.pid,
                    exc,
                )
                return None
            if item is not None and item.state is ItemState.CLAIMED and item.token == started[1]:
                found.append(started)
                self._attempts[started[0]] = item.attempts
        return found

    async def _spend_attempt(self, child: Any, code: int, claim: tuple[str, int], budget: WaitBudget) -> None:
        attempts = self._attempts.get(claim[0], 0)
        # The fleet's max_attempts caps what it claims (as the workers do for handler failures).
        capped = attempts >= self.options.max_attempts
        text = f"its worker process {child.proc.pid} died while running this item alone: {how_it_ended(code)}"
        if capped:
            text += f" (poisoned after {attempts} attempts: the fleet's max_attempts)"
        try:
            state = await budget.call(
                "charging the item that killed its process",
                self.hive.storage.fail(self.options.pool, claim[0], claim[1], error_text(text), 0.0, capped),
            )
        except WorkhiveError as exc:
            log.warning("failing item %s of a dead worker failed (its lease will expire): %s", claim[0], exc)
            return
        if state is ItemState.POISONED:
            self.tally.poisoned += 1
        elif state is not None:
            self.tally.failed += 1

    async def _suspect(self, child: Any, code: int, claims: list[tuple[str, int]], budget: WaitBudget) -> None:
        suspects = self.hive.shared(SUSPECTS)
        for item_id, _ in claims:
            try:
                await budget.call(
                    "marking a crash suspect",
                    suspects.put(
                        suspect_key(self.options.pool, item_id),
                        {"pid": child.proc.pid, "exit": code, "beside": len(claims) - 1},
                        ttl=SUSPECT_TTL,
                    ),
                )
            except WorkhiveError as exc:
                log.warning("marking item %s as a crash suspect failed: %s", item_id, exc)
        log.warning(
            "worker process %d died (%s) running %d items: %s get their attempt back and each runs "
            "alone from now on, until the one that kills its process is known",
            child.proc.pid,
            how_it_ended(code),
            len(claims),
            ", ".join(item_id for item_id, _ in claims),
        )

    async def _release(self, child: Any, code: int, budget: WaitBudget, *, put_back: bool) -> None:
        """Give back what the dead child's workers still hold, unspent, and record them as stopped."""
        failed: list[str] = []
        last: WorkhiveError | None = None
        for worker_id in sorted(child.worker_ids):
            try:
                # Claims it had not started yet (and refunded suspects) get their attempt back.
                released = await budget.call(
                    "releasing a dead worker's claims", self.hive.storage.release_by_worker(None, worker_id, False)
                )
            except WorkhiveError as exc:
                failed.append(worker_id)
                last = exc
                continue
            if put_back:
                self.tally.released += released
                self.put_back += released
            try:
                await budget.call(
                    "recording a dead worker as stopped",
                    self.hive.storage.set_worker_status(
                        worker_id, WorkerStatus.STOPPED, f"process {child.proc.pid} died ({how_it_ended(code)})"
                    ),
                )
            except WorkhiveError as exc:  # the registry's status is informational
                log.debug("recording dead worker %s as stopped failed: %s", worker_id, exc)
        if failed:
            self.left_to_expire += len(failed)
            log.warning(
                "the claims of %d worker(s) of dead process %d could not be released (%s); they come back when "
                "their leases expire",
                len(failed),
                child.proc.pid,
                last,
            )
