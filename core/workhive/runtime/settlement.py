"""Settling a claim: what a worker sends to end it, and what a repeat's refusal means.

A worker ends each claim with one settling call: ``complete``, ``fail`` or
``release``. When that call fails with a storage error the item is not
settled (``StorageUnavailable``) or may not be (``OutcomeUnknown``: applied
once or not at all). Dropping the item then leaves it claimed by a live
worker, whose heartbeat renews every lease it holds (storage rule W3): the
claim would be renewed forever and nobody else could take the item.

So the worker keeps a ``Settlement`` and sends it again, with the same fencing
token, until storage answers. That is safe for every settling call: each acts
only on the live claim with that token (storage rule A1), so a repeat of one
that was applied changes nothing and is refused like a stale claim.
``earlier_send_applied`` tells such a refusal from a lost claim by the item as
it is now, so that an applied settlement is counted once: not as lost, not
twice. A worker that cannot get an answer within its storage-fault budget
stops being heart-beaten (``Worker.heartbeat_wanted``), and what it holds
expires within a lease.

>>> s = Settlement(Kind.COMPLETE, item, result={"ok": True})  # doctest: +SKIP
>>> earlier_send_applied(s, await pool.get(item.id))           # doctest: +SKIP
True
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import attrs

from workhive.errors import WorkhiveError
from workhive.models import ItemState, WorkItem

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["Kind", "Settlement", "announce", "earlier_send_applied"]


class Kind(enum.Enum):
    """Which settling call a ``Settlement`` makes."""

    COMPLETE = "complete"
    FAIL = "fail"
    RELEASE = "release"


@attrs.frozen
class Settlement:
    """One settling call for a claimed item, kept so that it can be sent again exactly.

    ``item`` is the item as claimed (its fencing token and attempts are the
    claim's). ``result``: what a completion keeps. ``error``, ``poison`` and
    ``retry_after``: a failure's text (as stored) and options. ``delay``: when a
    released item is due again.
    """

    kind: Kind
    item: WorkItem
    result: Any = None
    error: str = ""
    poison: bool = False
    retry_after: float | None = None
    delay: float = 0.0

    @property
    def action(self) -> str:
        """What the call does, for log lines: ``completing item i…``."""
        verb = {Kind.COMPLETE: "completing", Kind.FAIL: "failing", Kind.RELEASE: "releasing"}[self.kind]
        return f"{verb} item {self.item.id}"


def earlier_send_applied(settlement: Settlement, current: WorkItem | None) -> bool:
    """Whether an earlier send of ``settlement`` took effect, judged by ``current`` (read after a refused repeat).

    A refused repeat means the claim is no longer live: the item left it through
    the earlier send, or another way (its lease expired, the worker was reaped,
    another claim took it over). Tokens change only when an item is claimed, and
    every state keeps the last one, so the item shows which:

    * a completion was applied if the item is DONE under the claim's token:
      nothing else makes it DONE under that token;
    * a failure, if it is PENDING or POISONED under the token with the claim's
      attempt spent (a lease that expired meanwhile looks the same, and then
      too the attempt was spent and failed);
    * a release, if it is PENDING under the token with the attempt refunded.

    ``current`` None (the item is gone: purged) is never applied.
    """
    if current is None or current.token != settlement.item.token:
        return False
    if settlement.kind is Kind.COMPLETE:
        return current.state is ItemState.DONE
    if settlement.kind is Kind.FAIL:
        return current.state in (ItemState.PENDING, ItemState.POISONED) and current.attempts == settlement.item.attempts
    return current.state is ItemState.PENDING and current.attempts == settlement.item.attempts - 1


async def announce(hive: Hive, pool: str, settlement: Settlement, current: WorkItem) -> None:
    """Fire the event hook the pool fires when ``settlement`` is answered, for one applied unseen.

    ``Pool`` calls ``workhive_item_completed``/``failed``/``poisoned`` once a call
    answers; a send that was applied but raised never got there, so plugins
    (metrics' completed count and in-flight gauge among them) would miss it.
    Releases have no hook.
    """
    events = hive.manager.event_hooks
    hook = hive.manager.hook
    if settlement.kind is Kind.COMPLETE:
        if events["workhive_item_completed"]:
            hook.workhive_item_completed(pool=pool, item=settlement.item)
    elif settlement.kind is Kind.FAIL:
        if current.state is ItemState.POISONED:
            if events["workhive_item_poisoned"]:
                hook.workhive_item_poisoned(pool=pool, item=settlement.item, error=settlement.error)
        elif events["workhive_item_failed"]:
            try:
                now = await hive.now()
            except WorkhiveError:  # the hook still fires; "due now" is the best left to say
                now = current.available_at
            retry_in = max(0.0, current.available_at - now)
            hook.workhive_item_failed(pool=pool, item=settlement.item, error=settlement.error, retry_in=retry_in)
