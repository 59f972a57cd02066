"""Reading a refused repeat of a settlement: was the earlier send applied, or was the claim lost?"""

from __future__ import annotations

import attrs
import pytest

from workhive.models import ItemState, WorkItem
from workhive.runtime.settlement import Kind, Settlement, earlier_send_applied

#: the claim a settlement was made for: token 7, its second attempt, never released
CLAIMED = WorkItem(
    id="i000000000000002a",
    pool="jobs",
    payload="{}",
    state=ItemState.CLAIMED,
    priority=0,
    attempts=2,
    max_attempts=5,
    token=7,
    created_at=1.0,
    available_at=1.0,
    claimed_by="w1",
    lease_expires_at=100.0,
    lease_seconds=60.0,
)


def now(state: ItemState, **changes: object) -> WorkItem:
    """The item as storage shows it after the refusal."""
    if state is not ItemState.CLAIMED:
        changes = {"claimed_by": None, "lease_expires_at": None, "lease_seconds": None, **changes}
    return attrs.evolve(CLAIMED, state=state, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("current", "applied"),
    [
        (now(ItemState.DONE), True),  # our completion landed; the repeat found it done
        (now(ItemState.DONE, token=9), False),  # another claim completed it after ours was lost
        (now(ItemState.CLAIMED, token=9, claimed_by="w2"), False),  # taken over: our lease had expired
        (now(ItemState.PENDING), False),  # our lease expired and was settled: not completed
        (None, False),  # purged
    ],
)
def test_a_completion_was_applied_only_if_done_under_its_token(current, applied):
    assert earlier_send_applied(Settlement(Kind.COMPLETE, CLAIMED, result=1), current) is applied


@pytest.mark.parametrize(
    ("current", "applied"),
    [
        (now(ItemState.PENDING, error="boom"), True),  # put back for a retry, the attempt spent
        (now(ItemState.POISONED, error="boom"), True),  # dead-lettered
        (now(ItemState.PENDING, attempts=1, releases=1), False),  # refunded: given back, not failed
        (now(ItemState.DONE), False),
        (now(ItemState.CLAIMED, token=9, attempts=3), False),
    ],
)
def test_a_failure_was_applied_if_the_item_left_the_claim_with_its_attempt_spent(current, applied):
    assert earlier_send_applied(Settlement(Kind.FAIL, CLAIMED, error="boom"), current) is applied


@pytest.mark.parametrize(
    ("current", "applied"),
    [
        (now(ItemState.PENDING, attempts=1, releases=1), True),  # given back, the attempt refunded
        (now(ItemState.PENDING), False),  # the lease expired (attempt kept): not our release
        (now(ItemState.PENDING, attempts=1, releases=1, token=9), False),  # another claim's release
        (now(ItemState.POISONED), False),
    ],
)
def test_a_release_was_applied_if_the_item_is_pending_with_its_attempt_refunded(current, applied):
    assert earlier_send_applied(Settlement(Kind.RELEASE, CLAIMED, delay=0.0), current) is applied


def test_the_action_names_the_call_and_the_item():
    assert Settlement(Kind.FAIL, CLAIMED).action == "failing item i000000000000002a"
