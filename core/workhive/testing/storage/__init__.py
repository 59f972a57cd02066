"""The storage contract suite: the definition of a workhive storage backend.

Subclass ``StorageContract`` in your backend's tests and override
``make_backend``; every ``test_*`` method then runs against your backend
through the public ``Hive``/``Pool``/``Workers`` facade, reading raw state
through the backend (``get``, ``list_items``, ``stats``) as ground truth::

    from workhive.testing import StorageContract

    class TestMyBackend(StorageContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

Hooks: ``make_backend`` (always), ``make_missing_backend`` (the same store
with ``create=False``) and, for a backend declaring ``"multiprocess"``,
``multiprocess_store`` (the URL and options another process opens it by).

Capability flags (class attributes) switch optional parts:

* ``supports_manual_clock``: tests move time by hand through ``clock`` (pass
  it as ``clock=``, or as ``clock_offset=clock.offset`` on a server backend,
  which then also sets ``clock_drift``).
  A second subclass with it False runs the contract on the real clock:
  time-dependent tests then wait with short leases, exact-boundary tests skip.
* ``"notify"`` in ``backend.capabilities``: ``wait_for_work`` must wake on push.
* ``"multiprocess"``: several processes drain one pool (``multiprocess_store``).

This module is the manifest: one mixin per rule family, each in its own file,
in the order of the rule table in ``workhive/storage.py`` (whose file column
names them). Hooks, flags, fixtures and helpers are in ``base.py``.
"""

from __future__ import annotations

from workhive.testing.storage.bad_input import BadInputRules
from workhive.testing.storage.base import ContractBase
from workhive.testing.storage.cancel import CancelRules
from workhive.testing.storage.claim import ClaimRules
from workhive.testing.storage.complete_and_claim import CompleteAndClaimRules
from workhive.testing.storage.expiry import ExpiryRules
from workhive.testing.storage.fencing import FencingRules
from workhive.testing.storage.groups import GroupRules
from workhive.testing.storage.opening import OpeningRules
from workhive.testing.storage.push import PushRules
from workhive.testing.storage.reading import ReadingRules
from workhive.testing.storage.requeue_and_purge import RequeueAndPurgeRules
from workhive.testing.storage.schedules import ScheduleRules
from workhive.testing.storage.settling import SettlingRules
from workhive.testing.storage.shared_state import SharedStateRules
from workhive.testing.storage.steps import StepRules
from workhive.testing.storage.waiting import WaitingRules
from workhive.testing.storage.workers import WorkerRules

__all__ = ["ContractBase", "StorageContract"]


class StorageContract(
    OpeningRules,  # F1-F5, M1: opening.py
    PushRules,  # P1-P3: push.py
    ClaimRules,  # C1-C4: claim.py
    FencingRules,  # A1: fencing.py
    SettlingRules,  # D1-D3, E1-E2, S1: settling.py
    ExpiryRules,  # X1-X3: expiry.py
    ReadingRules,  # G1, L1-L3, T1-T3: reading.py
    RequeueAndPurgeRules,  # Q1-Q2, U1: requeue_and_purge.py
    WorkerRules,  # W1-W6, R1-R2: workers.py
    SharedStateRules,  # K1: shared_state.py
    WaitingRules,  # N1-N2: waiting.py
    CompleteAndClaimRules,  # O1: complete_and_claim.py
    ScheduleRules,  # SC1-SC5: schedules.py
    StepRules,  # ST1-ST6: steps.py (optional capability KeepsSteps)
    CancelRules,  # Z1-Z3: cancel.py (optional: Cancels)
    GroupRules,  # GR1-GR9: groups.py (optional: ServesGroups)
    BadInputRules,  # V1: bad_input.py
):
    """Subclass in your backend's tests and override ``make_backend`` (see the module docstring)."""
