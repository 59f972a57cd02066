-- Every statement workhive-sqlite runs against a hive's tables, one per
-- `-- name --` header, each with a line saying what it does and what its
-- parameters are. Transaction control (BEGIN IMMEDIATE, COMMIT, ROLLBACK) and
-- PRAGMAs stay in Python: they set up the connection, and a PRAGMA's value cannot
-- be a parameter.
--
-- `?N` parameters are used where a value appears more than once; the backend
-- rewrites them to plain `?` once per statement (ops._positional says why).
-- `-- fragment: name --` blocks are text that statements share: a line
-- `@name(key=value, ...)` in a statement stands for it, indented like that line
-- (workhive.sqlfiles).

-- fragment: item_columns --
-- Every column of an item, in WorkItem's order (ops._item).
id, pool, payload, state, priority, attempts, max_attempts, token, created_at, available_at,
claimed_by, lease_expires_at, lease_seconds, dedup_key, error, result, finished_at, releases, grp

-- fragment: claimed_columns --
-- What a claim reads back: the columns it did not just set itself (ops._claimed). A
-- claimable item never has a result or finished_at (done items are never claimable;
-- every way back to pending clears finished_at). Converting seven fewer columns per
-- row measured about 5 us less per claim.
id, payload, priority, attempts, max_attempts, token, created_at, available_at, dedup_key, error, releases, grp

-- fragment: worker_columns --
-- Every column of a worker, in WorkerRecord's order (ops._worker).
worker_id, host, pid, pools, capabilities, status, registered_at, last_heartbeat, detail

-- fragment: claim_set --
-- What a claim sets: ?4 the worker, ?5 the lease seconds, ?6 the lease's expiry. An
-- expired lease counts as available at its expiry, which becomes its available_at.
UPDATE items SET
    state = 'claimed',
    available_at = CASE WHEN state = 'claimed' THEN lease_expires_at ELSE available_at END,
    claimed_by = ?4,
    attempts = attempts + 1,
    token = token + 1,
    lease_seconds = ?5,
    lease_expires_at = ?6

-- fragment: ready --
-- The best ?3 ready pending items of pool ?1 at time ?2, read off the items_ready
-- index in claim order: O(limit * log n) however deep the backlog. INDEXED BY pins
-- that plan: the planner has no statistics to choose it by. (Since version 11 that
-- index holds ungrouped items only, `grp IS NULL`: a pool that uses groups is
-- claimed by turns, off items_group_ready.)
SELECT id FROM items INDEXED BY items_ready
WHERE pool = ?1 AND state = 'pending' AND grp IS NULL AND available_at <= ?2
ORDER BY priority DESC, available_at, id LIMIT ?3

-- fragment: no_expired --
-- Only while no lease in the pool has expired (one probe of items_leases, evaluated
-- once per statement): an expired lease may come first in claim order, and it may
-- have to be poisoned instead (ops._claim).
AND NOT EXISTS (SELECT 1 FROM items INDEXED BY items_leases
                WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2)

-- fragment: no_groups --
-- Only in a pool that does not use groups (one probe of group_pools): a pool that
-- does is claimed by turns (workhive_sqlite.groups), never by these statements.
AND NOT EXISTS (SELECT 1 FROM group_pools WHERE pool = ?1)

-- claim_one --
-- The common claim of one item of pool ?1 at time ?2 (?3 = 1): no expired lease in
-- the pool. `id = (...)` for one item avoids building the IN list's temporary table.
@claim_set()
WHERE id = (
    @ready()
)
    @no_expired()
    @no_groups()
RETURNING
    @claimed_columns()

-- claim_ready --
-- The common claim of up to ?3 items of pool ?1 at time ?2: no expired lease in the pool.
@claim_set()
WHERE id IN (
    @ready()
)
    @no_expired()
    @no_groups()
RETURNING
    @claimed_columns()

-- claim_any --
-- The claim with expired leases about: candidates are the best ?3 ready items and
-- the best ?3 expired leases (each branch bounded on its own index), merged. Never in
-- a pool that uses groups: only a claim by turns counts a grouped claim (version 9).
@claim_set()
WHERE id IN (
    SELECT id FROM (
        SELECT id, priority, t FROM (
            SELECT id, priority, available_at AS t FROM items INDEXED BY items_ready
            WHERE pool = ?1 AND state = 'pending' AND grp IS NULL AND available_at <= ?2
            ORDER BY priority DESC, available_at, id LIMIT ?3)
        UNION ALL
        SELECT id, priority, t FROM (
            SELECT id, priority, lease_expires_at AS t FROM items
            WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2
            ORDER BY priority DESC, lease_expires_at, id LIMIT ?3)
        ORDER BY 2 DESC, 3, 1 LIMIT ?3))
    @no_groups()
RETURNING
    @claimed_columns()

-- peek --
-- When the common claim took nothing: whether pool ?1 has a ready item at time ?2,
-- whether it has an expired lease, and whether it uses groups.
SELECT
    (SELECT 1 FROM items INDEXED BY items_ready
     WHERE pool = ?1 AND state = 'pending' AND grp IS NULL AND available_at <= ?2 LIMIT 1),
    (SELECT 1 FROM items INDEXED BY items_leases
     WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2 LIMIT 1),
    (SELECT 1 FROM group_pools WHERE pool = ?1)

-- poison_expired --
-- An expired lease (pool ?1, time ?2) on an item with no attempts left is poisoned,
-- not claimed: an item that kills its worker every time must not loop forever.
UPDATE items SET moves = moves + 1,
    state = 'poisoned',
    error = 'lease expired after attempt ' || attempts || ' of ' || max_attempts
            || ' (worker ' || coalesce(claimed_by, '?') || ' stopped heartbeating or crashed)',
    finished_at = ?2,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2 AND attempts >= max_attempts

-- complete --
-- Item ?3 of pool ?4 is done with result ?1 at time ?2, if its claim (token ?5) is current and unexpired.
-- It assigns moves: the groups' trigger lowers the group's count of claims in flight
-- where claims are counted (migration 0012). complete_quiet is the same without.
UPDATE items SET moves = moves + 1, state = 'done', result = ?1, finished_at = ?2,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?3 AND pool = ?4 AND state = 'claimed' AND token = ?5 AND lease_expires_at > ?2

-- complete_quiet --
-- complete, not followed by the groups' trigger: only inside a transaction that read
-- the pool's group_pools.counted as 0 or found no row (ops._complete), where the
-- trigger has nothing to do for a completion and its start cost about a quarter of one.
UPDATE items SET state = 'done', result = ?1, finished_at = ?2, lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?3 AND pool = ?4 AND state = 'claimed' AND token = ?5 AND lease_expires_at > ?2

-- fail --
-- Item ?5 of pool ?6 (claim token ?7) failed with error ?2 at time ?4: poisoned when
-- ?1 says so or its attempts are spent, else pending again from time ?3.
UPDATE items SET moves = moves + 1,
    state = CASE WHEN ?1 OR attempts >= max_attempts THEN 'poisoned' ELSE 'pending' END,
    error = ?2,
    available_at = CASE WHEN ?1 OR attempts >= max_attempts THEN available_at ELSE ?3 END,
    finished_at = CASE WHEN ?1 OR attempts >= max_attempts THEN ?4 ELSE NULL END,
    claimed_by = CASE WHEN ?1 OR attempts >= max_attempts THEN claimed_by ELSE NULL END,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?5 AND pool = ?6 AND state = 'claimed' AND token = ?7 AND lease_expires_at > ?4
RETURNING state

-- release --
-- Item ?2 of pool ?3 (claim token ?4, checked at time ?5) goes back to pending from
-- time ?1, its attempt refunded.
UPDATE items SET moves = moves + 1, state = 'pending', available_at = ?1, attempts = attempts - 1, releases = releases + 1,
    claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?2 AND pool = ?3 AND state = 'claimed' AND token = ?4 AND lease_expires_at > ?5

-- extend --
-- Item ?2 of pool ?3 (claim token ?4, checked at time ?5) is leased until ?1. The new
-- lease length ?6 becomes the item's: heartbeats then keep extending by it.
UPDATE items SET lease_expires_at = ?1, lease_seconds = ?6
WHERE id = ?2 AND pool = ?3 AND state = 'claimed' AND token = ?4 AND lease_expires_at > ?5

-- last_item_id --
-- The last item id handed out (push numbers new items from it, under the write lock).
SELECT seq FROM sqlite_sequence WHERE name = 'items'

-- live_duplicate --
-- The oldest pending or claimed item of pool ? holding dedup key ?.
SELECT id FROM items INDEXED BY items_dedup
WHERE pool = ? AND dedup_key = ? AND state IN ('pending', 'claimed') ORDER BY id LIMIT 1

-- insert_items --
-- New pending rows of pool ?1 created at time ?2; ?3..?9 are one row's id, payload,
-- priority, max_attempts, available_at, dedup key and group. Inserting many rows per
-- statement binds and steps far less than one statement per row (about 3x faster per
-- item), so the backend also runs this with its VALUES group repeated 100 times, the
-- k-th group's ?3..?9 numbered on by 7k (ops._insert_sql). That text is written once,
-- at import, from this one: a file holding all 100 groups would be 700 parameters
-- no reader checks by eye.
INSERT INTO items (id, pool, payload, state, priority, max_attempts, created_at, available_at, dedup_key, grp) VALUES (?3,?1,?4,'pending',?5,?6,?2,?7,?8,?9)

-- count_rows --
-- Pool ?1 gained ?2 rows (negative: lost them). Rows per pool (see schema version 2):
-- push adds, purge subtracts.
INSERT INTO pools (pool, items) VALUES (?1, ?2) ON CONFLICT (pool) DO UPDATE SET items = items + excluded.items

-- get_item --
-- Item ? of pool ?.
SELECT
    @item_columns()
FROM items WHERE id = ? AND pool = ?

-- list_items --
-- Items of pool ? in state ?, in id order: ? of them after skipping ?.
SELECT
    @item_columns()
FROM items WHERE pool = ? AND state = ? ORDER BY id LIMIT ? OFFSET ?

-- requeue_all --
-- Every poisoned item of pool ?2 is pending again from time ?1, with its attempts back.
UPDATE items SET moves = moves + 1, state = 'pending', available_at = ?1, attempts = 0, finished_at = NULL,
    claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
WHERE pool = ?2 AND state = 'poisoned'

-- requeue_one --
-- requeue_all for item ?3 only (one primary-key update per id).
UPDATE items SET moves = moves + 1, state = 'pending', available_at = ?1, attempts = 0, finished_at = NULL,
    claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
WHERE pool = ?2 AND state = 'poisoned' AND id = ?3

-- poison_lost_worker --
-- Worker ?1 was lost at time ?2: its items with no attempts left are poisoned. The
-- *_in_pool variants of this and the next statements touch pool ?3 only.
UPDATE items INDEXED BY items_leases
SET moves = moves + 1, state = 'poisoned', finished_at = ?2, lease_expires_at = NULL, lease_seconds = NULL,
    error = 'worker ' || ?1 || ' was lost holding attempt ' || attempts || ' of ' || max_attempts
WHERE claimed_by = ?1 AND state = 'claimed' AND attempts >= max_attempts

-- poison_lost_worker_in_pool --
UPDATE items INDEXED BY items_leases
SET moves = moves + 1, state = 'poisoned', finished_at = ?2, lease_expires_at = NULL, lease_seconds = NULL,
    error = 'worker ' || ?1 || ' was lost holding attempt ' || attempts || ' of ' || max_attempts
WHERE claimed_by = ?1 AND state = 'claimed' AND pool = ?3 AND attempts >= max_attempts

-- release_worker --
-- Worker ?1's items are pending again from time ?2, the attempt spent.
UPDATE items INDEXED BY items_leases SET moves = moves + 1, state = 'pending', available_at = ?2, claimed_by = NULL,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE claimed_by = ?1 AND state = 'claimed'

-- release_worker_in_pool --
UPDATE items INDEXED BY items_leases SET moves = moves + 1, state = 'pending', available_at = ?2, claimed_by = NULL,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE claimed_by = ?1 AND state = 'claimed' AND pool = ?3

-- refund_worker --
-- Worker ?1's items are pending again from time ?2, the attempt refunded.
UPDATE items INDEXED BY items_leases SET moves = moves + 1, state = 'pending', available_at = ?2, claimed_by = NULL,
    lease_expires_at = NULL, lease_seconds = NULL, attempts = max(attempts - 1, 0), releases = releases + 1
WHERE claimed_by = ?1 AND state = 'claimed'

-- refund_worker_in_pool --
UPDATE items INDEXED BY items_leases SET moves = moves + 1, state = 'pending', available_at = ?2, claimed_by = NULL,
    lease_expires_at = NULL, lease_seconds = NULL, attempts = max(attempts - 1, 0), releases = releases + 1
WHERE claimed_by = ?1 AND state = 'claimed' AND pool = ?3

-- purge_candidates --
-- Finished items of pool ? finished before time ? (a read: done items have no index).
SELECT id FROM items WHERE pool = ? AND state IN ('done', 'poisoned', 'cancelled') AND finished_at < ?

-- purge_item --
-- Delete item ? of pool ? if it is still finished before time ?.
DELETE FROM items WHERE id = ? AND pool = ? AND state IN ('done', 'poisoned', 'cancelled') AND finished_at < ?

-- fragment: pending --
-- The pending items of pool ?1 (their group and available_at): the ungrouped ones off
-- items_ready, the grouped ones off items_group_ready (version 11: each holds its own).
SELECT grp, available_at FROM items INDEXED BY items_ready
WHERE pool = ?1 AND state = 'pending' AND grp IS NULL
UNION ALL
SELECT grp, available_at FROM items INDEXED BY items_group_ready
WHERE pool = ?1 AND state = 'pending' AND grp IS NOT NULL

-- count_pending --
-- Pending items of pool ?1, and how many of them are ready at time ?2 (off the two
-- ready indexes, never a table scan: stats counts per partial index).
SELECT count(*), count(CASE WHEN available_at <= ?2 THEN 1 END) FROM (
    @pending()
)

-- oldest_ready --
-- When pool ?1's oldest pending item ready at time ?2 became available.
SELECT min(available_at) FROM (
    @pending()
) WHERE available_at <= ?2

-- count_expired --
-- Expired leases of pool ? at time ?: how many have attempts left, how many have not,
-- and the oldest expiry among the first.
SELECT count(CASE WHEN attempts < max_attempts THEN 1 END), count(CASE WHEN attempts >= max_attempts THEN 1 END), min(CASE WHEN attempts < max_attempts THEN lease_expires_at END) FROM items WHERE pool = ? AND state = 'claimed' AND lease_expires_at <= ?

-- count_claimed --
-- Claimed items of pool ?.
SELECT count(*) FROM items INDEXED BY items_leases WHERE pool = ? AND state = 'claimed'

-- count_poisoned --
-- Poisoned items of pool ?.
SELECT count(*) FROM items INDEXED BY items_poisoned WHERE pool = ? AND state = 'poisoned'

-- pool_rows --
-- Rows of pool ? (done items have no index: they are the rest).
SELECT items FROM pools WHERE pool = ?

-- pools --
-- Every pool that has items, by name.
SELECT pool FROM pools WHERE items > 0 ORDER BY pool

-- next_pending --
-- When pool ?1's next pending item comes due: the earliest available_at of each
-- distinct priority (a loose scan of items_ready), so O(priorities * log n).
WITH RECURSIVE levels(p) AS (
    SELECT max(priority) FROM items INDEXED BY items_ready WHERE pool = ?1 AND state = 'pending' AND grp IS NULL
    UNION ALL
    SELECT (SELECT max(priority) FROM items INDEXED BY items_ready
            WHERE pool = ?1 AND state = 'pending' AND grp IS NULL AND priority < levels.p)
    FROM levels WHERE levels.p IS NOT NULL)
SELECT min((SELECT min(available_at) FROM items INDEXED BY items_ready
            WHERE pool = ?1 AND state = 'pending' AND grp IS NULL AND priority = levels.p))
FROM levels WHERE levels.p IS NOT NULL

-- next_lease_expiry --
-- When pool ?'s first lease expires.
SELECT min(lease_expires_at) FROM items WHERE pool = ? AND state = 'claimed'

-- register_worker --
-- A worker (id, host, pid, pools and capabilities as JSON, registered and heard from at time ?), starting.
INSERT OR REPLACE INTO workers (
    @worker_columns()
) VALUES (?, ?, ?, ?, ?, 'starting', ?, ?, NULL)
RETURNING
    @worker_columns()

-- worker_status --
-- Worker ?'s status.
SELECT status FROM workers WHERE worker_id = ?

-- heard_from --
-- Worker ? was heard from at time ?.
UPDATE workers SET last_heartbeat = ? WHERE worker_id = ?
RETURNING
    @worker_columns()

-- extend_worker_leases --
-- Every unexpired lease of worker ?2 runs its own lease length on from time ?1.
UPDATE items INDEXED BY items_leases SET lease_expires_at = ?1 + lease_seconds
WHERE claimed_by = ?2 AND state = 'claimed' AND lease_expires_at > ?1

-- set_worker_status --
-- Worker ?'s status and detail are ? and ?.
UPDATE workers SET status = ?, detail = ? WHERE worker_id = ?

-- get_worker --
-- Worker ?.
SELECT
    @worker_columns()
FROM workers WHERE worker_id = ?

-- list_workers --
-- Every worker, in registration order.
SELECT
    @worker_columns()
FROM workers ORDER BY registered_at, worker_id

-- list_workers_on_host --
-- Every worker on host ?, in registration order.
SELECT
    @worker_columns()
FROM workers WHERE host = ? ORDER BY registered_at, worker_id

-- silent_workers --
-- Workers neither lost nor stopped whose last heartbeat is older than time ?.
SELECT worker_id, last_heartbeat FROM workers
WHERE status NOT IN ('lost', 'stopped') AND last_heartbeat < ? ORDER BY last_heartbeat, worker_id

-- worker_lost --
-- Worker ? is lost, with detail ? saying why.
UPDATE workers SET status = 'lost', detail = ? WHERE worker_id = ?

-- state_expire --
-- Keys of namespace ? expired at time ? go (the area stays small without a sweeper).
DELETE FROM shared_state WHERE namespace = ? AND expires_at <= ?

-- state_put --
-- Namespace ?, key ? holds value ? until time ? (NULL: for good).
INSERT OR REPLACE INTO shared_state (namespace, key, value, expires_at) VALUES (?, ?, ?, ?)

-- state_get --
-- The value of namespace ?, key ?, unless expired at time ?.
SELECT value FROM shared_state WHERE namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)

-- state_scan --
-- Every key and value of namespace ? not expired at time ?, by key.
SELECT key, value FROM shared_state WHERE namespace = ? AND (expires_at IS NULL OR expires_at > ?) ORDER BY key

-- state_delete --
-- Delete namespace ?, key ?; its expiry tells whether it was still live.
DELETE FROM shared_state WHERE namespace = ? AND key = ? RETURNING expires_at

-- budget_tats --
-- The theoretical arrival time of budget key ?. budget.py repeats the `?` for as many
-- keys as a take names (`IN (?, ?, ...)`), one text per count, built once each.
SELECT key, tat FROM budgets WHERE key IN (?)

-- budget_store --
-- Budget key ? has theoretical arrival time ?.
INSERT INTO budgets (key, tat) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET tat = excluded.tat

-- clock_anchor --
-- This file's hive-time anchor: the boot it belongs to and its offset.
SELECT boot_id, offset FROM clock WHERE id = 0

-- clock_latest --
-- The latest times the file holds, so a new anchor never starts before them: the
-- clock row's own record, the newest item's creation, any heartbeat.
SELECT max(coalesce((SELECT seen FROM clock WHERE id = 0), 0),
           coalesce((SELECT created_at FROM items ORDER BY id DESC LIMIT 1), 0),
           coalesce((SELECT max(last_heartbeat) FROM workers), 0))

-- clock_set_anchor --
-- Boot ? anchors hive time at offset ?, seen up to time ?.
INSERT OR REPLACE INTO clock (id, boot_id, offset, seen) VALUES (0, ?, ?, ?)

-- clock_seen --
-- Hive time has reached ? (the floor for the next boot's anchor).
UPDATE clock SET seen = max(seen, ?) WHERE id = 0

-- user_tables --
-- How many tables the file has besides SQLite's own (a version-0 file with some was
-- written by another program).
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'

-- schedule_add --
-- A new schedule: name, pool, cron, every, tz, payload, catch_up, created_at (a taken
-- name inserts nothing: the caller sees no row changed).
INSERT INTO schedules (name, pool, cron, every, tz, payload, catch_up, created_at, last_tick)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (name) DO NOTHING

-- schedule_get --
-- Schedule ?, every column in workhive.schedules.Schedule's order.
SELECT name, pool, cron, every, tz, payload, catch_up, created_at, last_tick FROM schedules WHERE name = ?

-- schedule_list --
-- Every schedule by name, every column in Schedule's order.
SELECT name, pool, cron, every, tz, payload, catch_up, created_at, last_tick FROM schedules ORDER BY name

-- schedule_remove --
-- Delete schedule ?.
DELETE FROM schedules WHERE name = ?

-- schedule_advance --
-- Schedule ? (the second parameter) has fired through tick ? (the first and third), if
-- no tick at or after it was fired before; returns its pool when it moved (no row:
-- nothing to fire).
UPDATE schedules SET last_tick = ? WHERE name = ? AND (last_tick IS NULL OR last_tick < ?) RETURNING pool

-- step_claim_is_current --
-- Whether claim token ?3 of item ?1 in pool ?2 is its current claim, unexpired at time ?4
-- (the fence of every step write, as for complete/fail/extend).
SELECT 1 FROM items WHERE id = ?1 AND pool = ?2 AND state = 'claimed' AND token = ?3 AND lease_expires_at > ?4

-- step_insert --
-- Step ?2 of item ?1: result ?3, failed ?4, stored under claim token ?5 at time ?6; a key
-- stored already keeps its first value.
INSERT INTO steps (item_id, key, payload, failed, token, stored_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (item_id, key) DO NOTHING

-- step_list --
-- The steps of item ? in pool ?, in store order.
SELECT s.key, s.payload, s.failed, s.token, s.stored_at
FROM steps s JOIN items i ON i.id = s.item_id
WHERE s.item_id = ? AND i.pool = ?
ORDER BY s.n

-- step_clear --
-- Delete the steps of item ?1 of pool ?2 unless it is live (pending or claimed).
DELETE FROM steps WHERE item_id = ?1
    AND EXISTS (SELECT 1 FROM items WHERE id = ?1 AND pool = ?2 AND state NOT IN ('pending', 'claimed'))

-- cancel_state --
-- Cancelling (rules Z1-Z3): the state item ? of pool ? is in, read in the write
-- transaction that then cancels it.
SELECT state FROM items WHERE id = ? AND pool = ?

-- cancel_one --
-- Item ?2 of pool ?3, pending or claimed, is cancelled at time ?1: finished, lease
-- fields cleared, holder and token kept (an expired claim too: Z1 lets it be).
UPDATE items SET moves = moves + 1, state = 'cancelled', finished_at = ?1, lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?2 AND pool = ?3 AND state IN ('pending', 'claimed')

-- requeue_cancelled_one --
-- Cancelled item ?3 of pool ?2 is pending again from time ?1 with its attempts back
-- (requeue by id; requeue_all takes poisoned items only).
UPDATE items SET moves = moves + 1, state = 'pending', available_at = ?1, attempts = 0, finished_at = NULL,
    claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
WHERE pool = ?2 AND state = 'cancelled' AND id = ?3

-- count_cancelled --
-- Cancelled items of pool ?.
SELECT count(*) FROM items INDEXED BY items_cancelled WHERE pool = ? AND state = 'cancelled'

-- Groups (schema version 8; workhive_sqlite.groups, rules GR1-GR9). A pool uses groups
-- from its first grouped push or group setting on; '' is its ungrouped items' group.

-- group_pool --
-- Whether pool ? uses groups.
SELECT 1 FROM group_pools WHERE pool = ?

-- group_pool_add --
-- Pool ? uses groups from now on (nothing if it did already).
INSERT OR IGNORE INTO group_pools (pool) VALUES (?)

-- group_adopt_pending --
-- When pool ? starts using groups: its ungrouped pending items join the group ''.
-- This and the next three run once per pool, each over one partial index; done
-- items keep NULL (they are never claimable again).
UPDATE items INDEXED BY items_ready SET grp = '' WHERE pool = ? AND state = 'pending' AND grp IS NULL

-- group_adopt_claimed --
UPDATE items INDEXED BY items_leases SET grp = '' WHERE pool = ? AND state = 'claimed' AND grp IS NULL

-- group_adopt_poisoned --
UPDATE items INDEXED BY items_poisoned SET grp = '' WHERE pool = ? AND state = 'poisoned' AND grp IS NULL

-- group_adopt_cancelled --
UPDATE items INDEXED BY items_cancelled SET grp = '' WHERE pool = ? AND state = 'cancelled' AND grp IS NULL

-- group_adopt_counts --
-- After the adoption above (which the triggers do not see: grp changed, not state),
-- the head and the claims of the group '' of pool ?1 are taken once.
INSERT OR REPLACE INTO groups (pool, grp, weight, lim, vt, paused_until, head, inflight, weight_set)
VALUES (?1, '', 1, NULL, 0, NULL,
    (SELECT max(priority) FROM items INDEXED BY items_group_ready WHERE pool = ?1 AND grp = '' AND state = 'pending'),
    (SELECT count(*) FROM items INDEXED BY items_leases WHERE pool = ?1 AND state = 'claimed'),
    0)

-- group_claim_turns --
-- What a claim by turns of pool ?1 at time ?2 reads, in one statement: first the
-- pool's limit, default group limit and virtual time, whether its groups' claims
-- are counted (schema version 10) and whether it has an expired lease to settle,
-- the same in every row (the EXISTS is evaluated once); then one row per group
-- with pending items, in turn order (highest pending priority, then virtual time,
-- then name; off groups_turns, no sort), as far as the claim reads: its settings
-- and counts, and the id and priority of its first item ready at time ?2 in claim
-- order (NULL: none; two probes of one index), so a group serving one turn needs
-- no read of its own. A pool none of whose groups has pending items gives one row
-- with NULL group columns. A claim that finds an expired lease settles it and runs
-- this again.
SELECT p.lim, p.default_lim, p.vt, p.counted,
    EXISTS (SELECT 1 FROM items INDEXED BY items_leases
            WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2),
    g.grp, g.head, g.vt, g.weight, g.lim, g.paused_until, g.inflight,
    (SELECT id FROM items INDEXED BY items_group_ready
     WHERE pool = ?1 AND grp = g.grp AND state = 'pending' AND available_at <= ?2
     ORDER BY priority DESC, available_at, id LIMIT 1),
    (SELECT priority FROM items INDEXED BY items_group_ready
     WHERE pool = ?1 AND grp = g.grp AND state = 'pending' AND available_at <= ?2
     ORDER BY priority DESC, available_at, id LIMIT 1)
FROM group_pools AS p LEFT JOIN groups AS g INDEXED BY groups_turns ON g.pool = ?1 AND g.head IS NOT NULL
WHERE p.pool = ?1
ORDER BY g.head DESC, g.vt, g.grp

-- group_settle_expired --
-- Before a claim by turns (pool ?1, time ?2, after poison_expired): every other
-- expired lease is pending again from its expiry, so the groups' heads and counts
-- of claims in flight (kept by the triggers) see it, and its slot is free.
UPDATE items INDEXED BY items_leases SET moves = moves + 1, state = 'pending', available_at = lease_expires_at, claimed_by = NULL,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2

-- group_counts_claims --
-- Whether pool ? counts its groups' claims in flight (a row with counted = 1), read by a
-- transaction completing items before it chooses complete or complete_quiet.
SELECT counted FROM group_pools WHERE pool = ?

-- group_pool_settings --
-- Pool ?'s limit, default group limit and virtual time.
SELECT lim, default_lim, vt FROM group_pools WHERE pool = ?

-- group_pool_in_flight --
-- Pool ?1's unexpired claims at time ?2 (read only when it has a limit: about that many entries).
SELECT count(*) FROM items INDEXED BY items_leases WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at > ?2

-- group_ready_items --
-- Up to ?4 items of group ?2 of pool ?1 ready at time ?3 in claim order, after the
-- first ?5 (read before, in the same claim), and their priorities.
SELECT id, priority FROM items INDEXED BY items_group_ready
WHERE pool = ?1 AND grp = ?2 AND state = 'pending' AND available_at <= ?3
ORDER BY priority DESC, available_at, id LIMIT ?4 OFFSET ?5

-- claim_items --
-- Claim the items whose ids the JSON array ?1 lists (chosen by turns) for worker ?4,
-- lease ?5 seconds until ?6: one statement for a whole batch.
@claim_set()
WHERE id IN (SELECT value FROM json_each(?1))
RETURNING
    @claimed_columns()

-- claim_group_items --
-- A claim by turns whose every turn goes to one group (groups._plan: no other group has
-- an item it may take): up to ?3 of group ?7's items of pool ?1 ready at time ?2, in
-- claim order, for worker ?4, lease ?5 seconds until ?6. The statement an ungrouped
-- claim is, off items_group_ready: no list of ids read first and sent back (claim_items).
@claim_set()
WHERE id IN (
    SELECT id FROM items INDEXED BY items_group_ready
    WHERE pool = ?1 AND grp = ?7 AND state = 'pending' AND available_at <= ?2
    ORDER BY priority DESC, available_at, id LIMIT ?3)
RETURNING
    @claimed_columns()

-- group_took_turns --
-- After a claim by turns (claim_items), for each group it served: its virtual time is
-- ?, it has ? more claims in flight (0 where they are not counted), and its head is
-- read again (pool ?, group ?;
-- plain `?`, as it runs once per served group by executemany). Schema version 9:
-- the trigger no longer counts claims one item at a time.
UPDATE groups SET vt = ?, inflight = inflight + ?,
    head = (SELECT max(priority) FROM items INDEXED BY items_group_ready
            WHERE pool = groups.pool AND grp = groups.grp AND state = 'pending')
WHERE pool = ? AND grp = ?

-- group_count_claims --
-- Pool ?1's groups' claims in flight are counted while some group has a limit (its
-- own, or the default for named groups): the flag follows, after a limit changed.
-- Returns it only when it changed (no row: unchanged).
UPDATE group_pools SET counted = (
    default_lim IS NOT NULL OR EXISTS (SELECT 1 FROM groups WHERE pool = ?1 AND lim IS NOT NULL))
WHERE pool = ?1
    AND counted IS NOT (default_lim IS NOT NULL OR EXISTS (SELECT 1 FROM groups WHERE pool = ?1 AND lim IS NOT NULL))
RETURNING counted

-- group_recount --
-- Every group of pool ?1 has as many claims in flight as items_leases holds for it
-- (expired ones too, as the kept counts do until a claim settles them): taken once,
-- when counting starts, in one pass over the pool's claims.
WITH held AS MATERIALIZED (
    SELECT grp, count(*) AS n FROM items INDEXED BY items_leases
    WHERE pool = ?1 AND state = 'claimed' GROUP BY grp)
UPDATE groups SET inflight = coalesce((SELECT n FROM held WHERE held.grp = groups.grp), 0)
WHERE pool = ?1

-- group_pool_vt --
-- Pool ?2's virtual time is ?1.
UPDATE group_pools SET vt = ?1 WHERE pool = ?2

-- group_set_weight --
-- Group ?2 of pool ?1 weighs ?3 (kept before it has items).
INSERT INTO groups (pool, grp, weight, weight_set) VALUES (?1, ?2, ?3, 1)
ON CONFLICT (pool, grp) DO UPDATE SET weight = excluded.weight, weight_set = 1

-- group_set_limit --
-- Group ?2 of pool ?1 may have ?3 claims in flight (NULL: no limit of its own).
INSERT INTO groups (pool, grp, lim) VALUES (?1, ?2, ?3)
ON CONFLICT (pool, grp) DO UPDATE SET lim = excluded.lim

-- group_pause --
-- Claims skip group ?2 of pool ?1 until time ?3 (NULL: not paused).
INSERT INTO groups (pool, grp, paused_until) VALUES (?1, ?2, ?3)
ON CONFLICT (pool, grp) DO UPDATE SET paused_until = excluded.paused_until

-- group_set_default_limit --
-- Every named group of pool ?2 without a limit of its own may have ?1 claims in flight.
UPDATE group_pools SET default_lim = ?1 WHERE pool = ?2

-- group_set_pool_limit --
-- Pool ?2 may have ?1 claims in flight (NULL: no limit).
UPDATE group_pools SET lim = ?1 WHERE pool = ?2

-- group_report_settings --
-- Every group row of pool ?: name, weight, own limit, paused until, whether a weight was set.
SELECT grp, weight, lim, paused_until, weight_set FROM groups WHERE pool = ?

-- group_report_pending --
-- Pending items of pool ?1 per group: ready at time ?2, and not yet due.
SELECT grp, count(CASE WHEN available_at <= ?2 THEN 1 END), count(CASE WHEN available_at > ?2 THEN 1 END)
FROM (
    @pending()
) GROUP BY grp

-- group_report_claimed --
-- Claimed items of pool ?1 per group at time ?2: unexpired, and expired with attempts left (ready again).
SELECT grp, count(CASE WHEN lease_expires_at > ?2 THEN 1 END),
    count(CASE WHEN lease_expires_at <= ?2 AND attempts < max_attempts THEN 1 END)
FROM items INDEXED BY items_leases WHERE pool = ?1 AND state = 'claimed' GROUP BY grp

-- group_next_pending --
-- When pool ?1 (which uses groups) has its next pending item not yet due at time ?2
-- come due: the earliest such available_at of each group with pending items (read
-- off groups_turns) and each distinct priority in it, a loose scan of
-- items_group_ready, so O(groups * priorities * log n).
WITH RECURSIVE levels(g, p) AS (
    SELECT grp, head FROM groups INDEXED BY groups_turns WHERE pool = ?1 AND head IS NOT NULL
    UNION ALL
    SELECT g, (SELECT max(priority) FROM items INDEXED BY items_group_ready
               WHERE pool = ?1 AND grp = levels.g AND state = 'pending' AND priority < levels.p)
    FROM levels WHERE levels.p IS NOT NULL)
SELECT min((SELECT min(available_at) FROM items INDEXED BY items_group_ready
            WHERE pool = ?1 AND grp = levels.g AND state = 'pending' AND priority = levels.p
                AND available_at > ?2))
FROM levels WHERE levels.p IS NOT NULL

-- group_next_resume --
-- When the first pause of a group of pool ?1 with pending items ends after time ?2.
SELECT min(paused_until) FROM groups WHERE pool = ?1 AND head IS NOT NULL AND paused_until > ?2
