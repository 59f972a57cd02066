# ruff: noqa: E501  (the rule table below is wider than code lines; it reads best unwrapped)
"""The storage contract: what a backend must do, and nothing about how.

A backend is any object with these async methods. The ``Hive`` facade does
argument validation, JSON encoding, default options, events and error
messages; a backend only stores and moves items atomically. That keeps the
protocol small enough for SQLite, PostgreSQL (``FOR UPDATE SKIP LOCKED``,
batched acks through ``complete`` taking many, ``LISTEN/NOTIFY`` behind
``wait_for_work``) and Redis (Lua scripts per call) alike.

Every rule below is checked by ``workhive.testing`` (``StorageContract``;
test names without their ``test_`` prefix; [model] = ``StorageStatefulContract``,
which runs on every backend). Work down the table, one family at a time: the
file column names the module of ``workhive/testing/storage/`` that holds the
family's tests (``__init__.py`` there lists the families in this order). Every
test's docstring starts with the ids of the rules it checks, and the table
names it under each of them (``tests/core/test_contract_table.py`` keeps the
two in step).

Times are the backend's (``await now()``), never the caller's. "Live" means
PENDING or CLAIMED. The facade validates every argument first, so a backend
sees only valid input.

======================  ====  ==================  ==========================================================  ==========================================================================
file                    id    method              rule                                                        checked by
======================  ====  ==================  ==========================================================  ==========================================================================
opening.py              F1    factory (plugin)    ``factory(url, *, create=True, clock=None, ...)``: with     (unknown options: tests/core/test_storage_options.py),
                                                  ``create=False`` a hive that does not exist raises          create_false_opens_only_an_existing_hive
                                                  ``HiveNotFound`` naming the place (never a secret) and
                                                  creates nothing (no file, directory, schema or key); an
                                                  existing one opens. Unknown options: ``ConfigError``
                                                  naming them (the core refuses any the plugin's
                                                  ``StoragePlugin(options=...)`` does not declare).
                        F2    factory (plugin)    Embedded backends take ``clock=`` (a callable returning     (every test: ManualClock),
                                                  seconds); server backends take ``clock_offset=`` (a         [model]
                                                  callable; seconds added to every server time they read).
                                                  The suite passes ``ManualClock`` / ``clock.offset``; a
                                                  server backend's subclasses set ``clock_drift``.
                        F3    factory (plugin)    URLs: ``scheme:///relative/path`` is relative to the        (sqlite's own tests)
                                                  current directory, ``scheme:////absolute/path`` absolute;
                                                  options after ``?``; malformed: ``ConfigError`` saying the
                                                  expected form.
                        F4    any                 ``StorageUnavailable``: the store cannot be reached or      (each backend's own tests)
                                                  opened (``OutcomeUnknown`` if a write may or may not have
                                                  been applied); ``StorageCorrupt``/``SchemaVersionError``:
                                                  data not understood; other ``StorageError``: any other
                                                  storage failure. Never a driver's own exception.
                        F5    Hive()              every method below exists and is ``async def``;             (core: test_backend_check)
                                                  ``capabilities`` is a frozenset of str
                                                  (``"notify"``, ``"multiprocess"``).
                        M1    "multiprocess"      declared only if processes opening the same store (the      several_processes_drain_one_pool
                                                  subclass's ``multiprocess_store``) never double-claim or
                                                  lose an item.

push.py                 P1    push                new items PENDING, ``attempts=0``, ``available_at =         push_stores_a_pending_item,
                                                  now + delay``, ids returned in order.                       delayed_item_waits_for_its_time
                        P2    push                ids have the ``workhive.ids`` shape and are unique across   item_ids_have_the_documented_shape_and_are_unique_across_pools,
                                                  every pool of the hive, never reused (not after purge).     [model]
                        P3    push                ``dedup_key``: if a live item of the pool holds the key,    dedup_key_returns_the_live_item,
                                                  no item is made and its id is returned (within a batch      dedup_within_one_batch,
                                                  too); DONE/POISONED items free their key.                   dedup_key_of_a_poisoned_item_is_free,
                                                                                                              [model]

claim.py                C1    claim               takes up to ``limit`` claimable items: PENDING with         claim_from_an_empty_or_unknown_pool_returns_none,
                                                  ``available_at <= now``, or CLAIMED with an expired lease   claim_order_is_priority_then_fifo,
                                                  and attempts left; order: priority (higher first), then     available_at_orders_items_of_equal_priority,
                                                  when it became available, then push order.                  priority_beats_an_earlier_available_at,
                                                                                                              push_many_and_claim_many,
                                                                                                              a_lease_ends_exactly_at_its_expiry,
                                                                                                              a_spent_expired_lease_first_in_order_does_not_hide_the_items_after_it,
                                                                                                              [model]
                        C2    claim               each: CLAIMED, ``claimed_by``, ``attempts += 1``, token     claim_takes_a_lease_and_a_token,
                                                  above any it had, ``lease_seconds = lease``,                expired_lease_is_claimable_again_with_a_higher_token
                                                  ``lease_expires_at = now + lease``; ``available_at`` kept.
                        C3    claim               one item is never under two unexpired leases, across        several_processes_drain_one_pool,
                                                  tasks, processes and machines.                              claim_is_atomic_under_concurrent_tasks
                        C4    claim               each returned item equals a later ``get`` field for field.  claimed_items_equal_a_later_get_field_for_field

fencing.py              A1    any settling call   complete/fail/extend/release act only on a CLAIMED item of  stale_token_is_rejected_and_changes_nothing,
                                                  *that pool* whose token matches and whose lease has not     a_forged_token_is_rejected,
                                                  expired (``lease_expires_at > now``); otherwise they        an_expired_lease_cannot_complete,
                                                  change nothing and return ``False``/``None`` (the facade    acting_through_another_pool_changes_nothing,
                                                  raises ``LeaseLost``).                                      an_expired_claim_cannot_fail_or_release,
                                                                                                              a_lease_ends_exactly_at_its_expiry,
                                                                                                              a_forged_token_cannot_release_or_extend,
                                                                                                              [model]

settling.py             D1    complete            DONE, ``result`` and ``finished_at = now`` kept,            complete_keeps_the_result_and_twice_is_rejected,
                                                  ``claimed_by`` kept, lease fields cleared; per-ack          complete_without_result,
                                                  answers in a batch.                                         complete_many_accepts_valid_and_refuses_stale
                        D2    fail                ``error`` kept; POISONED (``finished_at = now``) if         attempts_count_per_claim_and_fail_poisons_when_spent,
                                                  ``poison`` or ``attempts >= max_attempts``, else PENDING    fail_schedules_a_retry_after_the_delay,
                                                  at ``now + retry_in``; returns the new state.               fail_with_poison_dead_letters_at_once
                        D3    release             PENDING at ``now + delay``, ``attempts -= 1``,              release_refunds_the_attempt
                                                  ``releases += 1``.
                        E1    extend              ``lease_expires_at = now + lease`` (returned) and           extend_moves_the_expiry,
                                                  ``lease_seconds = lease`` (heartbeats renew by it).         extend_sets_the_lease_that_heartbeats_renew
                        E2    extend              an extended lease still expires at its new time.            an_extended_lease_still_expires
                        S1    state               PENDING items have no ``claimed_by`` and no lease fields;   leaving_claimed_clears_the_lease_and_pending_clears_the_holder,
                                                  DONE/POISONED keep ``claimed_by`` (last holder), clear      [model]
                                                  the lease fields.

expiry.py               X1    expiry              an expired lease may be settled lazily (read as CLAIMED     expired_lease_is_claimable_again_with_a_higher_token,
                                                  until something looks), but is never honoured.              [model]
                        X2    expiry              a settled expiry is PENDING available from its expiry       an_expired_claim_is_available_from_its_expiry_not_from_when_it_is_noticed,
                                                  time (not from when it was noticed), attempts kept.         [model]
                        X3    expiry              with ``attempts >= max_attempts`` it becomes POISONED       repeated_lease_expiry_poisons_the_item,
                                                  instead, ``error`` containing "lease expired",              an_expired_lease_poisons_with_a_lease_expired_error,
                                                  ``finished_at`` between the expiry and now. Poisoned        a_spent_expired_lease_first_in_order_does_not_hide_the_items_after_it,
                                                  leases never count against a claim's ``limit``.             complete_and_claim_poisons_a_spent_expired_lease

reading.py              G1    get                 ``get(pool, id)``: that pool's item or None (an id of       get_is_scoped_to_its_pool,
                                                  another pool, or of another shape, is None).                [model]
                        L1    list_items          items of one state in push order, ``limit``/``offset``.     items_lists_by_state_oldest_first,
                                                                                                              listing_orders,
                                                                                                              dead_listing_and_requeue
                        L2    list_workers        in registration order (re-registering moves a worker to     listing_orders,
                                                  the end); filters as ``WorkerFilter.matches``.              register_get_list_and_status
                        L3    pools               sorted names of the pools that hold at least one item.      listing_orders,
                                                                                                              stats_size_and_pools,
                                                                                                              [model]
                        T1    stats               pending = ready PENDING, delayed = PENDING not yet due,     delayed_item_waits_for_its_time,
                                                  claimed, done, poisoned, cancelled (Z3): exact counts.      stats_size_and_pools,
                                                                                                              [model]
                        T2    stats               an expired lease counts as what it has become: pending      stats_counts_an_expired_claim_as_what_it_has_become,
                                                  (ready since its expiry) or poisoned if spent; never        [model]
                                                  claimed.
                        T3    stats               ``oldest_pending_at`` = min ``available_at`` over ready     oldest_pending_at_is_the_longest_waiting_item,
                                                  items (expired claims: their expiry); None when none.       oldest_pending_at_is_when_a_ready_item_became_available,
                                                                                                              [model]

requeue_and_purge.py    Q1    requeue             POISONED items (given ids, or all; CANCELLED ones by id     dead_listing_and_requeue,
                                                  only, Z3) to PENDING, now, ``attempts = 0``,                [model]
                                                  ``finished_at``/``claimed_by`` cleared, ``error`` kept;
                                                  unknown or repeated ids ignored; count.
                        Q2    requeue             a requeued item holds its dedup key again (unless another   requeue_restores_the_dedup_key,
                                                  live item took it meanwhile).                               [model]
                        U1    purge               deletes DONE/POISONED/CANCELLED items with ``finished_at    purge_deletes_old_finished_items,
                                                  < now - older_than`` (by finish time, never creation        purge_ages_items_by_when_they_finished,
                                                  time; strictly older); returns the count.                   purge_takes_only_items_finished_more_than_older_than_ago,
                                                                                                              [model]

workers.py              W1    register_worker     insert or replace: STARTING, ``registered_at =              register_get_list_and_status,
                                                  last_heartbeat = now``.                                     reregister_resets_the_record
                        W2    heartbeat           ``last_heartbeat = now``; LOST: ``WorkerLost``; unknown:    register_get_list_and_status,
                                                  ``WorkerNotFound``; returns the record.                     [model]
                        W3    heartbeat           renews every *unexpired* lease of the worker in every       heartbeat_extends_the_workers_leases_in_every_pool,
                                                  pool by its ``lease_seconds``; the renewed lease still      a_heartbeaten_lease_still_expires_and_an_expired_one_is_not_renewed,
                                                  expires when beats stop; expired ones are not revived.      [model]
                        W4    set_worker_status   sets status and detail; unknown worker: ``WorkerNotFound``  set_worker_status_of_an_unknown_worker_raises
                                                  and nothing registered.
                        W5    reap                workers not LOST or STOPPED with ``now - last_heartbeat >   reap_releases_a_lost_workers_items_in_every_pool,
                                                  threshold`` (strictly): each, atomically, LOST and          reap_is_strictly_older_and_stale_for_is_at_least,
                                                  ``release_by_worker(None, id, spend_attempt=True)``;        reap_skips_stopped_and_lost_workers_and_takes_every_other_status,
                                                  ``ReapedWorker(id, last_heartbeat, released, poisoned)``    deregister_refunds_and_stops,
                                                  where ``released`` excludes the poisoned.                   [model]
                        W6    list_workers        ``WorkerFilter.stale_for``: ``now - last_heartbeat >=       list_workers_stale_for,
                                                  stale_for`` (inclusive, unlike reap).                       reap_is_strictly_older_and_stale_for_is_at_least
                        R1    release_by_worker   every item CLAIMED by the worker in *that* pool (all        deregister_refunds_and_stops,
                                                  pools when None) back to PENDING now; ``spend_attempt``:    release_by_worker_spends_or_refunds,
                                                  attempts kept and spent items POISONED; else refunded.      release_by_worker_across_pools,
                                                  Returns the count of both.                                  release_by_worker_of_one_pool_leaves_the_others,
                                                                                                              [model]
                        R2    release_by_worker   a refunded claim counts in ``releases``; a spent one not.   release_by_worker_counts_refunds_as_releases

shared_state.py         K1    state_*             namespaced key/value (JSON text), optional ttl on the       shared_state_put_get_scan_delete,
                                                  backend's clock; a key reads as absent from ``now + ttl``   shared_state_expires,
                                                  on (get, scan, delete).                                     shared_state_expires_exactly_at_its_ttl

waiting.py              N1    wait_for_work       returns within ``timeout``; with ``"notify"`` a push        wait_for_work_returns_within_its_timeout,
                                                  wakes it.                                                   wait_for_work_wakes_on_push
                        N2    wait_for_work       with ``"notify"``, a delayed item coming due or a lease     wait_for_work_wakes_when_a_delayed_item_or_a_lease_comes_due
                                                  expiring wakes it too (no push happens for those).

complete_and_claim.py   O1    complete_and_claim  optional (``CompletesAndClaims``): complete one ack and,    complete_and_claim_completes_and_hands_out_the_next,
                                                  only if accepted, claim, atomically; refused: nothing       complete_and_claim_returns_none_when_nothing_is_left,
                                                  changes.                                                    complete_and_claim_with_a_stale_token_claims_nothing,
                                                                                                              complete_and_claim_follows_claim_order,
                                                                                                              complete_and_claim_reclaims_an_expired_lease,
                                                                                                              complete_and_claim_poisons_a_spent_expired_lease,
                                                                                                              complete_and_claim_under_concurrent_tasks_finishes_each_item_once,
                                                                                                              complete_and_claim_fires_completed_then_claimed,
                                                                                                              complete_and_claim_refuses_bad_input_and_keeps_the_claim,
                                                                                                              native_complete_and_claim_is_all_or_nothing

steps.py                ST1   step_put            optional (``KeepsSteps``): stores a step (key, JSON text,   step_put_stores_a_step_under_the_claim,
                                                  ``failed``) of an item only while the token is the item's   steps_of_several_items_and_pools_are_apart,
                                                  current unexpired claim in *that pool* (as A1); otherwise   [model]
                                                  ``False`` and nothing changes. ``stored_at = now``,
                                                  ``token`` kept.
                        ST2   step_put            fenced like A1: a stale, forged, expired, released,         a_stale_claim_cannot_store_a_step,
                                                  finished or other-pool claim stores nothing.                an_expired_claim_cannot_store_a_step,
                                                                                                              a_finished_item_takes_no_step,
                                                                                                              [model]
                        ST3   step_put            a key already stored keeps its first value (the call        a_stored_step_keeps_its_first_value
                                                  still answers ``True`` under a valid claim).
                        ST4   step_list           an item's steps in the order they were stored; ``[]`` for   step_list_survives_a_new_claim_in_store_order,
                                                  an unknown item; kept across claims, failures, releases,    steps_survive_release_fail_and_expiry,
                                                  expiry, completion and ``requeue``.                         [model]
                        ST5   purge / step_clear  ``purge`` removes the steps of the items it deletes;        purge_removes_the_steps_with_the_item,
                                                  ``step_clear(ids)`` removes those of the given items        step_clear_takes_only_finished_items,
                                                  that are not live (PENDING/CLAIMED keep theirs);            requeue_fresh_forgets_the_steps,
                                                  returns the count of steps removed.                         [model]
                        ST6   Pool facade         a step key empty, blank, too long or not printable, a       bad_step_input_changes_nothing,
                                                  value not JSON or longer than ``MAX_STEP_CHARS``:           steps_on_a_backend_without_them_are_refused
                                                  ``InvalidArgument``/``InvalidItem`` before the backend is
                                                  called; a backend without ``KeepsSteps``:
                                                  ``StepsUnsupported``. Nothing is stored, a claim is kept.

cancel.py               Z1    cancel              optional (``Cancels``): each given PENDING or CLAIMED       cancel_takes_pending_and_claimed_items,
                                                  item becomes CANCELLED, ``finished_at = now``, lease        cancel_reports_finished_and_unknown_ids_and_changes_nothing,
                                                  fields cleared, ``claimed_by`` (the holder, if any) and     cancel_on_a_backend_without_it_is_a_config_error,
                                                  token kept; returns per id the state it was in (None: no    [model]
                                                  such item in the pool). DONE/POISONED/CANCELLED items are
                                                  returned as they are, unchanged. An expired claim may be
                                                  settled first (X1): then it is cancelled as what it has
                                                  become, or returned POISONED if its attempts are spent.
                        Z2    cancel              a cancelled claim can no longer be completed, failed,       a_cancelled_claim_refuses_its_holder_and_is_not_renewed,
                                                  released or extended (A1: it is not CLAIMED); heartbeats    [model]
                                                  do not renew it and reap leaves it alone.
                        Z3    cancel              a cancelled item frees its dedup key (P3); ``list_items``   cancelled_items_are_listed_counted_requeued_and_purged,
                                                  lists it, ``stats().cancelled`` counts it, ``requeue``      [model]
                                                  with its id makes it PENDING like a POISONED one (Q1, Q2;
                                                  ``requeue(None)`` takes POISONED ones only), ``purge``
                                                  ages it out (U1).

groups.py               GR1   push / claim / get  optional (``ServesGroups``): ``NewItem.group`` is kept and  groups_are_kept_by_push_claim_get_and_every_way_back_to_pending,
                                                  returned on every ``WorkItem`` (None stays None); dedup     [model]
                                                  (P3) is per pool across groups; requeue, fail, release,
                                                  release_by_worker and expiry keep the group.
                        GR2   claim               turns: among the claimable items of the highest priority    equal_groups_take_turns_in_a_fixed_rotation,
                                                  an admissible group holds, each claim (a batch of n acts    a_batch_claim_takes_turns_as_single_claims_would,
                                                  as n one-item claims, also when it deals a group's turns    a_run_of_turns_leaves_what_single_claims_leave
                                                  in a row, and leaves the same turns behind it) takes the
                                                  oldest item (C1 order) of
                                                  the group whose turn it is; equal weights: strict rotation
                                                  in a fixed order while the groups stay backlogged.
                                                  Ungrouped items take turns as one group.
                        GR3   set_group_weight    weight w > 0 (default 1): while backlogged, after n claims  weights_share_the_claims
                                                  a group has taken n * w / sum(w) items, within 1 + the
                                                  number of groups.
                        GR4   claim               no banked credit: a group that becomes ready (push, a       a_group_that_becomes_ready_gets_no_banked_credit
                                                  delay due, an expiry) while others are backlogged is
                                                  served within k claims (k ready groups) and over the next
                                                  m claims takes at most m * w / sum(w) + 2.
                        GR5   claim               priority first: an admissible item of a higher priority is  a_higher_priority_goes_first_whatever_the_turns,
                                                  claimed before any item of a lower priority, whatever the   a_run_of_turns_leaves_what_single_claims_leave,
                                                  turns.                                                      [model]
                        GR6   set_group_limit     a claim never leaves more than n unexpired claims of a      a_higher_priority_goes_first_whatever_the_turns,
                                                  group (its own limit, else the default ``group=None`` for   a_group_limit_caps_its_claims_and_every_settlement_frees_a_slot,
                                                  named groups; ungrouped: only the pool's), across tasks,    a_default_group_limit_binds_every_named_group_without_its_own,
                                                  processes and machines; an expiry frees the slot at its     group_and_pool_limits_hold_under_concurrent_tasks,
                                                  expiry, complete/fail/release/cancel/reap at once; a group  group_and_pool_limits_hold_across_processes,
                                                  at its limit is skipped; lowering takes nothing back; the   a_run_of_turns_leaves_what_single_claims_leave,
                                                  claims in flight when a limit is set count against it.      a_limit_set_while_claims_are_in_flight_counts_them,
                                                                                                              [model]
                        GR7   set_pool_limit      a claim never leaves more than n unexpired claims in the    group_and_pool_limits_hold_under_concurrent_tasks,
                                                  pool, across tasks, processes and machines.                 group_and_pool_limits_hold_across_processes,
                                                                                                              a_pool_limit_caps_the_claims_of_every_group,
                                                                                                              [model]
                        GR8   pause_group         claims skip the group until backend now + seconds           a_paused_group_waits_and_resumes,
                                                  (claimable again at that time); None resumes at once; its   [model]
                                                  items wait, never fail.
                        GR9   group_report        settings are kept before a group or pool has items;         settings_made_before_any_item_are_kept,
                                                  ``group_report`` gives exactly                              the_group_report_counts_exactly,
                                                  ``GroupReport``/``GroupStats`` (expired claims ready,       bad_group_input_is_refused_and_changes_nothing,
                                                  never in flight). Facade: bad names ``InvalidName``, bad    groups_on_a_backend_without_them_are_a_config_error,
                                                  weight, limit or pause ``InvalidArgument``; a backend       [model]
                                                  without ``ServesGroups``: ``ConfigError``; nothing
                                                  changes.

../budgets.py           O2    take_budget         optional (``workhive.budgets.TakesBudget``): GCRA rate      ``workhive.testing.budgets.BudgetContract``
                                                  budgets; reserve the soonest of several choices within
                                                  ``max_wait`` atomically, on the backend's clock.

schedules.py            SC1   schedule_add        optional (``workhive.schedules.StoresSchedules``): stores   schedules_are_stored_listed_by_name_and_removed,
                                                  the schedule as given (get and list return it equal, list   a_taken_schedule_name_changes_nothing
                                                  sorted by name); a taken name: ``False``, nothing changes.
                        SC2   schedule_remove     deletes it (``True``), ``False`` when absent; a removed     schedules_are_stored_listed_by_name_and_removed,
                                                  schedule never fires.                                       fire_of_a_missing_or_removed_schedule_pushes_nothing
                        SC3   schedule_fire       atomically: if the schedule exists and ``last_tick`` is     fire_records_the_tick_and_pushes_the_item_once,
                                                  None or below ``tick``, ``last_tick = tick`` and the item   fire_of_a_missing_or_removed_schedule_pushes_nothing,
                                                  is pushed to its pool (returns its id); else ``None``,      fire_due_follows_the_clock_and_the_misfire_policy
                                                  nothing pushed, also after the item is done.
                        SC4   schedule_fire       one tick fired at once from many tasks, processes or        concurrent_fires_of_one_tick_push_one_item
                                                  hive handles pushes exactly one item.
                        SC5   Schedules facade    a cron that does not parse, an unknown time zone, every     bad_schedules_are_refused_and_nothing_is_stored
                                                  under 1 s, a bad name, data not JSON: ``InvalidArgument``
                                                  (``InvalidName``, ``InvalidItem``); a taken name
                                                  ``ScheduleExists``; nothing stored changes.

bad_input.py            V1    Hive facade         bad input (a value that is not JSON; a bad option, lease,   complete_and_claim_refuses_bad_input_and_keeps_the_claim,
                                                  count, ttl or name) raises ``InvalidItem``,                 non_json_payload_is_refused,
                                                  ``InvalidArgument`` or ``InvalidName`` (an unknown worker   non_json_result_is_refused_and_the_claim_kept,
                                                  status: ``ValueError``) before the backend is called:       bad_push_options_are_refused,
                                                  nothing is stored and a claim is kept.                      bad_lease_is_refused,
                                                                                                              bad_claim_count_is_refused,
                                                                                                              bad_fail_and_release_arguments_change_nothing,
                                                                                                              bad_pool_names_are_refused,
                                                                                                              bad_worker_names_and_thresholds_are_refused,
                                                                                                              bad_shared_state_input_is_refused
======================  ====  ==================  ==========================================================  ==========================================================================

How a backend's tests plug in (see ``workhive.testing``): ``make_backend(clock,
tmp_path)``; ``make_missing_backend`` (F1, same store, ``create=False``);
``multiprocess_store`` (M1, URL + options another process opens); a second
subclass with ``supports_manual_clock = False`` runs the contract on the real
clock. ``HYPOTHESIS_PROFILE=ci`` derandomises the model test, ``deep`` runs
many more examples.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from workhive.errors import PluginValidationError
from workhive.models import (
    Ack,
    GroupReport,
    ItemState,
    NewItem,
    PoolStats,
    ReapedWorker,
    StepRecord,
    WorkerFilter,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
)

__all__ = [
    "Cancels",
    "CompletesAndClaims",
    "KeepsSteps",
    "ServesGroups",
    "StorageBackend",
    "check_backend",
    "instant_claim_max",
]


#: the largest ``instant_claim_max`` a backend may give (the runtime's ADAPTIVE_MAX_HELD: all a process holds)
INSTANT_CLAIM_MAX_LIMIT = 1024


@runtime_checkable
class StorageBackend(Protocol):
    """What a ``workhive_storage`` factory returns.

    ``capabilities`` may hold ``"notify"`` (``wait_for_work`` wakes on push
    rather than sleeping out the timeout) and ``"multiprocess"`` (safe to share
    across processes).

    Optional: ``instant_claim_max``, an int from 1 to 1,024, the most items the
    fleet runtime's adaptive claim asks for at once when handlers take no time
    (256 without it; ``runtime.worker.ADAPTIVE_MAX_CLAIM``). A backend whose
    claim costs a network round trip and fixed statements gains from larger
    claims; an embedded one that holds a write lock while it claims does not.
    ``check_backend`` refuses any other value.
    """

    capabilities: frozenset[str]

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def now(self) -> float: ...

    # -- items --------------------------------------------------------------
    async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]: ...
    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]: ...
    async def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]: ...
    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None: ...
    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool: ...
    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None: ...
    async def get(self, pool: str, item_id: str) -> WorkItem | None: ...
    async def list_items(self, pool: str, state: ItemState, limit: int, offset: int = 0) -> list[WorkItem]: ...
    async def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int: ...
    async def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int: ...
    async def purge(self, pool: str, older_than: float) -> int: ...
    async def stats(self, pool: str) -> PoolStats: ...
    async def pools(self) -> list[str]: ...
    async def wait_for_work(self, pool: str, timeout: float) -> None: ...

    # -- workers ------------------------------------------------------------
    async def register_worker(self, registration: WorkerRegistration) -> WorkerRecord: ...
    async def heartbeat(self, worker_id: str) -> WorkerRecord: ...
    async def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None: ...
    async def get_worker(self, worker_id: str) -> WorkerRecord | None: ...
    async def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]: ...
    async def reap(self, threshold: float) -> list[ReapedWorker]: ...

    # -- shared state -------------------------------------------------------
    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None: ...
    async def state_get(self, namespace: str, key: str) -> str | None: ...
    async def state_scan(self, namespace: str) -> dict[str, str]: ...
    async def state_delete(self, namespace: str, key: str) -> bool: ...


@runtime_checkable
class CompletesAndClaims(Protocol):
    """An optional backend method: complete one claim and claim the next in one atomic step.

    Each claimed item still gets its own lease and fencing token; only the
    commits are shared. ``Pool`` checks for it once, with ``isinstance``, and
    falls back to ``complete`` then ``claim`` for backends without it.

    >>> class MyBackend:  # doctest: +SKIP
    ...     async def complete_and_claim(self, pool, ack, worker_id, limit, lease):
    ...         async with self.transaction():
    ...             if not (await self._complete(pool, [ack]))[0]:
    ...                 return False, []
    ...             return True, await self._claim(pool, worker_id, limit, lease)
    """

    async def complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        """Atomically ``complete(pool, [ack])``; only if accepted, ``claim(pool, worker_id, limit, lease)``.

        Returns ``(accepted, claimed)``. When the ack is refused nothing is
        claimed and nothing changes.
        """
        ...


@runtime_checkable
class Cancels(Protocol):
    """An optional backend method: cancel items, pending or claimed (rules Z1-Z3).

    ``Pool.cancel`` checks for it with ``isinstance`` and refuses with a
    ``ConfigError`` on a backend without it. The holder of a cancelled claim
    learns of it through ``get`` (its worker process reads its running items at
    each heartbeat); its settlements are refused meanwhile, as a lost claim's are (A1).

    >>> class MyBackend:  # doctest: +SKIP
    ...     async def cancel(self, pool, item_ids):
    ...         async with self.transaction():
    ...             return [await self._cancel_one(pool, item_id) for item_id in item_ids]
    """

    async def cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        """Cancel each live item of ``item_ids`` (distinct ids); per id, the state it was in (None: unknown)."""
        ...


@runtime_checkable
class KeepsSteps(Protocol):
    """An optional capability: durable steps inside an item (``ctx.step``), fenced by the claim's token.

    A step's result is written only while the writer's token is the item's
    current unexpired claim, so a claim that lost its item can never record a
    step the new holder does not know of. Backends without it make
    ``ctx.step`` raise ``StepsUnsupported``. Rules ST1-ST5 in the table above.

    >>> class MyBackend:  # doctest: +SKIP
    ...     async def step_put(self, pool, item_id, token, key, payload, failed):
    ...         async with self.transaction():
    ...             if not await self._claim_is_current(pool, item_id, token):
    ...                 return False
    ...             await self._insert_step_unless_present(pool, item_id, key, payload, failed, token)
    ...             return True
    """

    async def step_put(self, pool: str, item_id: str, token: int, key: str, payload: str, failed: bool) -> bool:
        """Store step ``key`` of the item under claim ``token``; ``False`` (nothing changes) if the claim is not current."""
        ...

    async def step_list(self, pool: str, item_id: str) -> list[StepRecord]:
        """The item's steps in store order (``[]`` for none or an unknown item)."""
        ...

    async def step_clear(self, pool: str, item_ids: Sequence[str]) -> int:
        """Remove the steps of the given items that are not PENDING or CLAIMED; returns how many steps went."""
        ...


@runtime_checkable
class ServesGroups(Protocol):
    """An optional capability: items carry a group (a tenant) and claims serve the groups in turn (GR1-GR9).

    A backend declaring it stores ``NewItem.group``, returns it on every
    ``WorkItem``, and honours turns, weights, limits and pauses in ``claim``,
    ``complete_and_claim`` and wherever an item becomes claimable. ``Pool``
    checks for it with ``isinstance`` and refuses ``group=`` and every group
    setting on a backend without it (``ConfigError``). Settings are kept per
    pool, also before the pool has items. docs/groups.md has the semantics.

    >>> class MyBackend:  # doctest: +SKIP
    ...     async def set_group_weight(self, pool, group, weight):
    ...         async with self.transaction():
    ...             await self._upsert_group(pool, group, weight=weight)
    """

    async def set_group_weight(self, pool: str, group: str, weight: float) -> None:
        """Group ``group``'s share of claims while backlogged (finite, > 0; default 1)."""
        ...

    async def set_group_limit(self, pool: str, group: str | None, limit: int | None) -> None:
        """At most ``limit`` unexpired claims of ``group`` (None: the default of every named group
        without its own); ``limit`` None removes the limit."""
        ...

    async def set_pool_limit(self, pool: str, limit: int | None) -> None:
        """At most ``limit`` unexpired claims in the pool (None: no limit)."""
        ...

    async def pause_group(self, pool: str, group: str, seconds: float | None) -> None:
        """Claims skip ``group`` until the backend's now + ``seconds``; None resumes it at once."""
        ...

    async def group_report(self, pool: str) -> GroupReport:
        """Every group with a live item or a setting of its own, with its counts (``GroupReport``)."""
        ...


#: every method a backend must have, each ``async def`` (from the protocol itself, so the two never drift)
REQUIRED_METHODS: tuple[str, ...] = tuple(
    name for name, value in vars(StorageBackend).items() if inspect.iscoroutinefunction(value)
)


def instant_claim_max(backend: object) -> int | None:
    """The backend's ``instant_claim_max`` (see ``StorageBackend``), or None when it names none.

    Read from its class or instance, never through a ``__getattr__`` (a test double that
    answers every name, or a proxy, names none); ``check_backend`` refused any bad value.

    >>> class Remote:
    ...     instant_claim_max = 512
    >>> instant_claim_max(Remote()), instant_claim_max(object())
    (512, None)
    """
    value = inspect.getattr_static(backend, "instant_claim_max", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_backend(backend: object) -> None:
    """Raise ``PluginValidationError`` naming every method ``backend`` lacks or has without ``async``.

    ``Hive`` calls it when it is built, so a half-written backend fails at
    once with the whole list rather than on first use of each gap.

    >>> check_backend(object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    workhive.errors.PluginValidationError: storage backend object is not a workhive StorageBackend: missing ...
    """
    missing = [name for name in REQUIRED_METHODS if not callable(getattr(backend, name, None))]
    not_async = [
        name
        for name in REQUIRED_METHODS
        if name not in missing and not inspect.iscoroutinefunction(getattr(backend, name))
    ]
    capabilities = getattr(backend, "capabilities", None)
    bad_capabilities = not isinstance(capabilities, (frozenset, set)) or not all(
        isinstance(c, str) for c in capabilities
    )
    claim_max = inspect.getattr_static(backend, "instant_claim_max", None)
    bad_claim_max = claim_max is not None and (
        isinstance(claim_max, bool) or not isinstance(claim_max, int) or not 1 <= claim_max <= INSTANT_CLAIM_MAX_LIMIT
    )
    if not (missing or not_async or bad_capabilities or bad_claim_max):
        return
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if not_async:
        problems.append(f"not async (define them with async def): {', '.join(not_async)}")
    if bad_capabilities:
        problems.append(f"capabilities must be a frozenset of strings, got {capabilities!r}")
    if bad_claim_max:
        problems.append(f"instant_claim_max must be an int from 1 to {INSTANT_CLAIM_MAX_LIMIT}, got {claim_max!r}")
    raise PluginValidationError(
        f"storage backend {type(backend).__name__} is not a workhive StorageBackend: {'; '.join(problems)}. "
        "workhive/storage.py lists every method and its rules",
        backend=backend,
    )
