-- Every statement workhive-postgres runs against a hive's schema, one per
-- `-- name --` header, each with a line saying what it does and what its
-- parameters are. Every object of the hive is written `@hive.name` (tables, the
-- item_ids sequence, now_s): sqlfiles.statements(schema) writes the quoted schema
-- in its place when a hive opens, so no statement depends on search_path (which
-- PgBouncer's transaction pooling cannot keep).
-- $1 is always the clock offset in seconds (0 outside tests): now_s($1) is the
-- server's clock plus it, read once per statement.
--
-- Statements on one claimed item (complete, fail, release, extend) find it by its
-- id and test the claim as one `(...) IS TRUE` expression. As separate conditions
-- the pool and lease tests let the planner read the lease index instead of the
-- primary key (its statistics often say few leases are held), and that index holds
-- an entry for every claim since the last vacuum: each completion then walked them
-- all, which made completing 2-3x slower than claiming in a busy pool.

-- push --
-- Insert new pending items in the order given ($3..$7, $9 are parallel arrays: payload,
-- priority, max_attempts, delay, dedup key, group or NULL), record the pool and its bands (claims
-- read a pool's priorities from claim_bands), wake waiters on channel $8. Items with a
-- group make the pool grouped (group_pools) and their groups live (the upsert locks each
-- group's row until the commit: a claim clearing it waits, then sees these items).
-- Returns the new ids in insertion order (sequence order).
WITH new_items AS (
    INSERT INTO @hive.items (pool, payload, state, priority, max_attempts, created_at, available_at, dedup_key, grp)
    SELECT $2, u.payload, 'pending', u.priority, u.max_attempts, @hive.now_s($1), @hive.now_s($1) + u.delay, u.dedup_key, coalesce(u.grp, '')
    FROM unnest($3::text[], $4::int[], $5::int[], $6::float8[], $7::text[], $9::text[])
        WITH ORDINALITY AS u (payload, priority, max_attempts, delay, dedup_key, grp, n)
    ORDER BY u.n
    RETURNING id
), known AS (
    INSERT INTO @hive.pools (pool) VALUES ($2) ON CONFLICT DO NOTHING
), grouped AS (
    INSERT INTO @hive.group_pools (pool) SELECT $2 WHERE EXISTS (SELECT FROM unnest($9::text[]) AS g WHERE g IS NOT NULL)
    ON CONFLICT DO NOTHING
), live_groups AS (
    INSERT INTO @hive.groups AS old (pool, grp, live)
    SELECT DISTINCT $2, g, true FROM unnest($9::text[]) AS g WHERE g IS NOT NULL ORDER BY 2
    ON CONFLICT (pool, grp) DO UPDATE SET live = true WHERE NOT old.live
), bands AS (
    INSERT INTO @hive.claim_bands (pool, priority) SELECT DISTINCT $2, p FROM unnest($4::int[]) AS p
    ON CONFLICT DO NOTHING
), woken AS (
    SELECT pg_notify($8, $2)
)
SELECT new_items.id FROM new_items CROSS JOIN woken ORDER BY new_items.id;

-- allocate_ids --
-- $1 new item numbers, in order (a large push then COPYs its rows with them).
SELECT nextval('@hive.item_ids') FROM generate_series(1, $1);

-- record_pool --
-- Pool $1 has been pushed to.
INSERT INTO @hive.pools (pool) VALUES ($1) ON CONFLICT DO NOTHING;

-- record_groups --
-- Pool $1 has items of groups $2 (distinct, sorted, none NULL): the pool is grouped and
-- those groups are live (as in push).
WITH grouped AS (
    INSERT INTO @hive.group_pools (pool) VALUES ($1) ON CONFLICT DO NOTHING
)
INSERT INTO @hive.groups AS old (pool, grp, live) SELECT $1, g, true FROM unnest($2::text[]) AS g
ON CONFLICT (pool, grp) DO UPDATE SET live = true WHERE NOT old.live;

-- record_bands --
-- Pool $1 has items of priorities $2 (claims visit the bands in claim_bands).
INSERT INTO @hive.claim_bands (pool, priority) SELECT DISTINCT $1, p FROM unnest($2::int[]) AS p
ON CONFLICT DO NOTHING;

-- dedup_lock --
-- Serialise pushes that carry dedup keys in pool $2 of this schema ($1) until commit.
SELECT pg_advisory_xact_lock(hashtextextended('workhive-dedup:' || $1 || ':' || $2, 0));

-- live_duplicates --
-- For dedup keys $2 in pool $1: the oldest pending or claimed item holding each.
SELECT dedup_key, min(id) AS id FROM @hive.items
WHERE pool = $1 AND dedup_key = ANY($2::text[]) AND state IN ('pending', 'claimed')
GROUP BY dedup_key;

-- fragment: claim_items --
-- The claim itself, shared by claim and complete_and_claim (a fragment, not a
-- statement: a line `@claim_items(name=value, ...)` in a statement stands for
-- this text, indented like that line, with each {name} replaced by its value
-- and the {only_if} line dropped when empty). {worker}, {lease} and {limit} are
-- the statement's parameters for the worker id, the lease seconds and the limit;
-- {only_if} is an extra condition on the candidates.
-- It claims for pools without groups only: it reads the ungrouped range of
-- items_claimable (grp = ''), and nothing at all once the pool has a group_pools
-- row (checked in the statement's own snapshot, which sees a grouped item only with
-- that row); the backend then runs claim_grouped for the pool.
-- Candidates come band by band (each priority of the pool, highest first), each band
-- read from its mark (migration 0005): the descent lands past the dead entries a held
-- vacuum horizon keeps, instead of walking them. The bands are a sorted subquery and
-- each band's rows a LIMITed lateral scan, so the nested loop hands rows out in claim
-- order and stops, locking nothing more, once the outer LIMIT has its rows.
UPDATE @hive.items SET
    state = CASE WHEN state = 'pending' OR attempts < max_attempts THEN 'claimed' ELSE 'poisoned' END,
    available_at = CASE WHEN state = 'claimed' AND attempts < max_attempts THEN lease_expires_at ELSE available_at END,
    claimed_by = CASE WHEN state = 'pending' OR attempts < max_attempts THEN {worker}::text ELSE claimed_by END,
    attempts = CASE WHEN state = 'pending' OR attempts < max_attempts THEN attempts + 1 ELSE attempts END,
    token = CASE WHEN state = 'pending' OR attempts < max_attempts THEN token + 1 ELSE token END,
    lease_seconds = CASE WHEN state = 'pending' OR attempts < max_attempts THEN {lease}::float8 END,
    lease_expires_at = CASE WHEN state = 'pending' OR attempts < max_attempts THEN @hive.now_s($1) + {lease}::float8 END,
    error = CASE WHEN state = 'pending' OR attempts < max_attempts THEN error
        ELSE 'lease expired after attempt ' || attempts || ' of ' || max_attempts
            || ' (worker ' || coalesce(claimed_by, '?') || ' stopped heartbeating or crashed)' END,
    finished_at = CASE WHEN state = 'pending' OR attempts < max_attempts THEN finished_at ELSE @hive.now_s($1) END
WHERE id = ANY (ARRAY (
    SELECT due.id
    FROM (
        SELECT band.priority, coalesce((
            SELECT mark.low FROM @hive.claim_marks AS mark
            WHERE mark.pool = band.pool AND mark.priority = band.priority
            ORDER BY mark.n DESC LIMIT 1), '-Infinity') AS low
        FROM @hive.claim_bands AS band
        WHERE band.pool = $2
            AND NOT EXISTS (SELECT FROM @hive.group_pools AS grouped WHERE grouped.pool = $2)
            {only_if}
        ORDER BY band.priority DESC
    ) AS band
    CROSS JOIN LATERAL (
        SELECT id FROM @hive.items
        WHERE pool = $2 AND grp = '' AND priority = band.priority AND state IN ('pending', 'claimed')
            AND (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END) >= band.low
            AND (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END) <= @hive.now_s($1)
        ORDER BY (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END), id
        LIMIT {limit} FOR UPDATE SKIP LOCKED
    ) AS due
    ORDER BY band.priority DESC
    LIMIT {limit}))
RETURNING id, payload, priority, attempts, max_attempts, token, created_at, available_at, lease_expires_at,
    dedup_key, error, releases, state = 'claimed' AS taken

-- claim --
-- Take up to $5 claimable items of pool $2 for worker $3 with a lease of $4 s: the
-- head of items_claimable (each band from its mark), due entries only, locked with SKIP LOCKED so concurrent
-- claimers never wait for each other. The head holds ready items and expired leases
-- in claim order (an expired lease counts as available from its expiry, and keeps
-- that time as its available_at). An expired lease with no attempts left is
-- poisoned instead and comes back with taken = false: a caller that got fewer than
-- $5 taken rows and some not taken claims again for the rest.
-- The ids go through ARRAY(...) so the UPDATE finds its rows by primary key: as a
-- join, a generic plan guessed a tenth of the index for LIMIT $5 and hashed the table.
-- The backend writes the limit, always the last parameter, into the text as a number
-- (sqlfiles.with_limit): costed as a tenth of the backlog, a generic plan lost to a
-- fresh plan on every call once the table was analyzed.
@claim_items(worker=$3, lease=$4, limit=$5, only_if=)

-- complete_one --
-- Mark item $3 of pool $2 done with result $5 if its claim (token $4) is current and unexpired.
UPDATE @hive.items SET state = 'done', result = $5, finished_at = @hive.now_s($1), lease_expires_at = NULL, lease_seconds = NULL
WHERE id = $3 AND (pool = $2 AND state = 'claimed' AND token = $4 AND lease_expires_at > @hive.now_s($1)) IS TRUE
RETURNING id;

-- complete_many --
-- complete_one for every (id, token, result) of the parallel arrays $3, $4, $5, in one
-- statement; returns the ids that were accepted.
-- Each array is an InitPlan's value, (SELECT $n): costed for any arrays (10 elements), the
-- plan made for any values then lost to a fresh plan costed for the arrays given whenever
-- fewer than 9 items came (a 5 ms handler's batch), so each such call was planned anew:
-- 100 us of planning against 60 us of running it. Now a fresh plan is costed as the
-- general one is, and the plan cache keeps that one after its first five calls.
UPDATE @hive.items SET state = 'done', result = acks.result, finished_at = @hive.now_s($1), lease_expires_at = NULL, lease_seconds = NULL
FROM unnest((SELECT $3::bigint[]), (SELECT $4::bigint[]), (SELECT $5::text[])) AS acks (id, token, result)
WHERE items.id = acks.id AND (items.pool = $2 AND items.state = 'claimed' AND items.token = acks.token
    AND items.lease_expires_at > @hive.now_s($1)) IS TRUE
RETURNING items.id;

-- complete_and_claim --
-- complete_one ($3 id, $4 token, $5 result) and, only if it was accepted, claim
-- ($6 worker, $7 lease, $8 limit, written in as a number as in claim) in the same
-- statement: one round trip and one commit per item of a worker loop. One row per
-- row the claim touched (or one row of NULLs), each carrying whether the completion
-- was accepted and, as in claim, whether the row was taken or poisoned.
WITH done AS (
    UPDATE @hive.items SET state = 'done', result = $5, finished_at = @hive.now_s($1), lease_expires_at = NULL, lease_seconds = NULL
    WHERE id = $3 AND (pool = $2 AND state = 'claimed' AND token = $4 AND lease_expires_at > @hive.now_s($1)) IS TRUE
    RETURNING id
), claimed AS (
    @claim_items(worker=$6, lease=$7, limit=$8, only_if=AND EXISTS (SELECT FROM done))
)
SELECT EXISTS (SELECT FROM done) AS accepted, claimed.*
FROM (VALUES (1)) AS one (n) LEFT JOIN claimed ON true;

-- fail --
-- Item $2 of pool $3 failed with error $5 under claim token $4: back to pending after
-- $6 s, or poisoned when $7 (poison) or its attempts are spent. Returns the new state.
UPDATE @hive.items SET
    state = CASE WHEN $7 OR attempts >= max_attempts THEN 'poisoned' ELSE 'pending' END,
    error = $5,
    available_at = CASE WHEN $7 OR attempts >= max_attempts THEN available_at ELSE @hive.now_s($1) + $6 END,
    finished_at = CASE WHEN $7 OR attempts >= max_attempts THEN @hive.now_s($1) ELSE NULL END,
    claimed_by = CASE WHEN $7 OR attempts >= max_attempts THEN claimed_by ELSE NULL END,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE id = $2 AND (pool = $3 AND state = 'claimed' AND token = $4 AND lease_expires_at > @hive.now_s($1)) IS TRUE
RETURNING state;

-- release --
-- Put item $2 of pool $3 (claim token $4) back to pending after $5 s, refunding the attempt.
UPDATE @hive.items SET state = 'pending', available_at = @hive.now_s($1) + $5, attempts = attempts - 1,
    releases = releases + 1, claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
WHERE id = $2 AND (pool = $3 AND state = 'claimed' AND token = $4 AND lease_expires_at > @hive.now_s($1)) IS TRUE
RETURNING id;

-- extend --
-- Give item $2 of pool $3 (claim token $4) a lease of $5 s from now; the new length
-- becomes the item's, so heartbeats keep extending by it. Returns the new expiry.
UPDATE @hive.items SET lease_expires_at = @hive.now_s($1) + $5, lease_seconds = $5
WHERE id = $2 AND (pool = $3 AND state = 'claimed' AND token = $4 AND lease_expires_at > @hive.now_s($1)) IS TRUE
RETURNING lease_expires_at;

-- item_state --
-- What a call whose connection dropped needs to learn whether it was applied:
-- item $1's state, token and error.
SELECT state, token, error FROM @hive.items WHERE id = $1;

-- get --
-- Item $1 of pool $2, every column.
SELECT id, pool, payload, state, priority, attempts, max_attempts, token, created_at, available_at,
    claimed_by, lease_expires_at, lease_seconds, dedup_key, error, result, finished_at, releases, nullif(grp, '')
FROM @hive.items WHERE id = $1 AND pool = $2;

-- list_items --
-- Items of pool $1 in state $2, oldest first, $3 of them after skipping $4.
SELECT id, pool, payload, state, priority, attempts, max_attempts, token, created_at, available_at,
    claimed_by, lease_expires_at, lease_seconds, dedup_key, error, result, finished_at, releases, nullif(grp, '')
FROM @hive.items WHERE pool = $1 AND state = $2 ORDER BY id LIMIT $3 OFFSET $4;

-- requeue --
-- Move poisoned items of pool $2 (ids $3, or all when $3 is NULL) back to pending, now,
-- with their attempts reset and their error kept; cancelled items by id only. Their
-- groups become live again (written unconditionally: the row lock until the commit is
-- what keeps a claim from clearing the group meanwhile). Returns how many moved.
WITH requeued AS (
    UPDATE @hive.items SET state = 'pending', available_at = @hive.now_s($1), attempts = 0, finished_at = NULL,
        claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
    WHERE pool = $2 AND ($3::bigint[] IS NULL OR id = ANY($3::bigint[]))
        AND (state = 'poisoned' OR (state = 'cancelled' AND $3::bigint[] IS NOT NULL))
    RETURNING grp
), revived AS (
    UPDATE @hive.groups SET live = true
    WHERE pool = $2 AND grp IN (SELECT DISTINCT grp FROM requeued WHERE grp <> '')
)
SELECT count(*) FROM requeued;

-- poison_worker_spent --
-- Worker $2 was lost: its claims (in pool $3, or every pool when NULL) that have no
-- attempts left are poisoned.
UPDATE @hive.items SET state = 'poisoned', finished_at = @hive.now_s($1), lease_expires_at = NULL, lease_seconds = NULL,
    error = 'worker ' || $2 || ' was lost holding attempt ' || attempts || ' of ' || max_attempts
WHERE claimed_by = $2 AND state = 'claimed' AND ($3::text IS NULL OR pool = $3) AND attempts >= max_attempts;

-- release_worker --
-- Every item claimed by worker $2 (in pool $3, or every pool when NULL) back to pending,
-- available now; with $4 the attempt is refunded (and counted as a release).
UPDATE @hive.items SET state = 'pending', available_at = @hive.now_s($1), claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL,
    attempts = CASE WHEN $4 THEN greatest(attempts - 1, 0) ELSE attempts END,
    releases = CASE WHEN $4 THEN releases + 1 ELSE releases END
WHERE claimed_by = $2 AND state = 'claimed' AND ($3::text IS NULL OR pool = $3);

-- purge --
-- Delete done, poisoned and cancelled items of pool $2 that finished more than $3 s ago.
DELETE FROM @hive.items
WHERE pool = $2 AND state IN ('done', 'poisoned', 'cancelled') AND finished_at < @hive.now_s($1) - $3;

-- stats --
-- Counts for pool $2: ready, delayed, claimed, done, poisoned, when the longest-waiting
-- ready item became available, and cancelled. Expired leases not yet settled count as what they already
-- are: ready since their expiry, or poisoned when their attempts are spent.
-- Each (SELECT now_s($1)) is an InitPlan, read once per statement (statement_timestamp(),
-- so all agree): a plain now_s($1) is evaluated per row and filter, a third of the scan's
-- time, and a join to a one-row clock subquery would stop the scan's parallel partial counts.
SELECT
    count(*) FILTER (WHERE (state = 'pending' AND available_at <= (SELECT @hive.now_s($1)))
        OR (state = 'claimed' AND lease_expires_at <= (SELECT @hive.now_s($1)) AND attempts < max_attempts)) AS ready,
    count(*) FILTER (WHERE state = 'pending' AND available_at > (SELECT @hive.now_s($1))) AS delayed,
    count(*) FILTER (WHERE state = 'claimed' AND lease_expires_at > (SELECT @hive.now_s($1))) AS claimed,
    count(*) FILTER (WHERE state = 'done') AS done,
    count(*) FILTER (WHERE state = 'poisoned'
        OR (state = 'claimed' AND lease_expires_at <= (SELECT @hive.now_s($1)) AND attempts >= max_attempts)) AS poisoned,
    least(
        min(available_at) FILTER (WHERE state = 'pending' AND available_at <= (SELECT @hive.now_s($1))),
        min(lease_expires_at) FILTER (WHERE state = 'claimed' AND lease_expires_at <= (SELECT @hive.now_s($1))
            AND attempts < max_attempts)
    ) AS oldest,
    count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM @hive.items WHERE pool = $2;

-- cancel --
-- Cancel items $3 of pool $2 (rules Z1-Z3): each pending or claimed one becomes
-- cancelled, finished now, lease fields cleared, holder and token kept. Returns
-- every id found with the state it was in (rows locked first, so no settlement
-- slips in between the read and the update).
WITH found AS (
    SELECT id, state FROM @hive.items WHERE pool = $2 AND id = ANY($3::bigint[]) FOR UPDATE
), cancelled AS (
    UPDATE @hive.items SET state = 'cancelled', finished_at = @hive.now_s($1), lease_expires_at = NULL, lease_seconds = NULL
    FROM found WHERE items.id = found.id AND found.state IN ('pending', 'claimed')
    RETURNING items.id
)
SELECT found.id, found.state FROM found;

-- pools --
-- Every pool that still has items, by name.
SELECT pool FROM @hive.pools WHERE EXISTS (SELECT FROM @hive.items WHERE items.pool = pools.pool) ORDER BY pool;

-- next_due --
-- Seconds until pool $2's next item becomes claimable (<= 0: now; NULL: nothing is coming):
-- the first entry of each band of items_claimable read from its mark, as a claim reads
-- them (a pending item's available_at, a held lease's expiry), so an idle worker's look
-- walks no more dead entries than a claim does.
SELECT min(head.at) - @hive.now_s($1)
FROM (
    SELECT band.priority, coalesce((
        SELECT mark.low FROM @hive.claim_marks AS mark
        WHERE mark.pool = band.pool AND mark.priority = band.priority
        ORDER BY mark.n DESC LIMIT 1), '-Infinity') AS low
    FROM @hive.claim_bands AS band
    WHERE band.pool = $2
) AS band
CROSS JOIN LATERAL (
    SELECT (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END) AS at FROM @hive.items
    WHERE pool = $2 AND grp = '' AND priority = band.priority AND state IN ('pending', 'claimed')
        AND (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END) >= band.low
    ORDER BY (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END), id
    LIMIT 1
) AS head;

-- fragment: mark_writers --
-- A new mark's third bound, shared by advance_marks and advance_group_marks: the start of
-- the oldest transaction holding a write lock on items, in the hive's clock (offset $1); a
-- start hidden from this role counts as -Infinity.
SELECT min(coalesce(extract(epoch FROM activity.xact_start)::float8 + $1, '-Infinity')) AS oldest
FROM pg_locks AS held JOIN pg_stat_activity AS activity ON activity.pid = held.pid
WHERE held.locktype = 'relation' AND held.relation = '@hive.items'::regclass
    AND held.mode = 'RowExclusiveLock' AND held.pid <> pg_backend_pid()

-- fragment: mark_head --
-- A band's first live entry of pool $2 in items_claimable, for the marks: of group {grp},
-- band due.priority, at or above due.low (from the bottom when due.sweep).
SELECT (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END) FROM @hive.items
WHERE pool = $2 AND grp = {grp} AND priority = due.priority AND state IN ('pending', 'claimed')
    AND (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END)
        >= (CASE WHEN due.sweep THEN '-Infinity' ELSE due.low END)
ORDER BY (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END), id
LIMIT 1

-- advance_marks --
-- Move the marks of pool $2's bands whose newest mark was set $3 s ago or more (migration
-- 0005 says why). A band's new mark is the lowest of: its first live entry at or above
-- its old mark (from the bottom when it has none or its last sweep is $5 s old), the
-- hive's clock (offset $1) minus the lag $4, and the start of each transaction holding
-- a write lock on items (it may commit entries keyed at its start; a start hidden from
-- this role counts as -Infinity). Older marks of those bands go. Returns the bands moved.
WITH due AS (
    SELECT band.priority, mark.low, mark.swept_at,
        mark.n IS NULL OR mark.swept_at <= @hive.now_s($1) - $5 AS sweep
    FROM @hive.claim_bands AS band
    LEFT JOIN LATERAL (
        SELECT m.low, m.set_at, m.swept_at, m.n FROM @hive.claim_marks AS m
        WHERE m.pool = band.pool AND m.priority = band.priority
        ORDER BY m.n DESC LIMIT 1
    ) AS mark ON true
    WHERE band.pool = $2 AND (mark.n IS NULL OR mark.set_at <= @hive.now_s($1) - $3)
), writers AS (
    @mark_writers()
), heads AS (
    SELECT due.priority, due.sweep, due.swept_at, (
        @mark_head(grp='')
    ) AS head
    FROM due
), added AS (
    INSERT INTO @hive.claim_marks (pool, priority, low, set_at, swept_at)
    SELECT $2, heads.priority, least(heads.head, @hive.now_s($1) - $4, writers.oldest), @hive.now_s($1),
        CASE WHEN heads.sweep THEN @hive.now_s($1) ELSE heads.swept_at END
    FROM heads CROSS JOIN writers
    RETURNING priority, n
), dropped AS (
    DELETE FROM @hive.claim_marks AS old USING added
    WHERE old.pool = $2 AND old.priority = added.priority AND old.n < added.n
)
SELECT count(*) FROM added;

-- advance_group_marks --
-- advance_marks for the live groups of pool $2 (migration 0011): each (group, band) whose
-- newest mark in group_marks was set $3 s ago or more, at most $6 of them a call, those
-- never marked or marked longest ago first, gets a new mark: the lowest of its first live
-- entry at or above its old mark (from the bottom when it has none or its last sweep is
-- $5 s old), the hive's clock (offset $1) minus the lag $4, and the start of each
-- transaction holding a write lock on items. Older marks of those pairs go. Returns how
-- many pairs moved.
WITH due AS (
    SELECT gr.grp, band.priority, mark.low, mark.swept_at,
        mark.n IS NULL OR mark.swept_at <= @hive.now_s($1) - $5 AS sweep
    FROM @hive.groups AS gr
    JOIN @hive.claim_bands AS band ON band.pool = gr.pool
    LEFT JOIN LATERAL (
        SELECT m.low, m.set_at, m.swept_at, m.n FROM @hive.group_marks AS m
        WHERE m.pool = gr.pool AND m.grp = gr.grp AND m.priority = band.priority
        ORDER BY m.n DESC LIMIT 1
    ) AS mark ON true
    WHERE gr.pool = $2 AND gr.live AND gr.grp <> '' AND (mark.n IS NULL OR mark.set_at <= @hive.now_s($1) - $3)
    ORDER BY mark.set_at NULLS FIRST, gr.grp, band.priority
    LIMIT $6
), writers AS (
    @mark_writers()
), heads AS (
    SELECT due.grp, due.priority, due.sweep, due.swept_at, (
        @mark_head(grp=due.grp)
    ) AS head
    FROM due
), added AS (
    INSERT INTO @hive.group_marks (pool, grp, priority, low, set_at, swept_at)
    SELECT $2, heads.grp, heads.priority, least(heads.head, @hive.now_s($1) - $4, writers.oldest), @hive.now_s($1),
        CASE WHEN heads.sweep THEN @hive.now_s($1) ELSE heads.swept_at END
    FROM heads CROSS JOIN writers
    RETURNING grp, priority, n
), dropped AS (
    DELETE FROM @hive.group_marks AS old USING added
    WHERE old.pool = $2 AND old.grp = added.grp AND old.priority = added.priority AND old.n < added.n
)
SELECT count(*) FROM added;

-- now --
-- The hive's clock.
SELECT @hive.now_s($1);

-- notify --
-- Wake the waiters of pool $2 on channel $1.
SELECT pg_notify($1, $2);

-- register_worker --
-- Insert or replace worker $2's record: starting, registered and heartbeating now.
INSERT INTO @hive.workers (worker_id, host, pid, pools, capabilities, status, registered_at, last_heartbeat, detail)
VALUES ($2, $3, $4, $5, $6, 'starting', @hive.now_s($1), @hive.now_s($1), NULL)
ON CONFLICT (worker_id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, pools = excluded.pools, capabilities = excluded.capabilities,
    status = excluded.status, registered_at = excluded.registered_at, last_heartbeat = excluded.last_heartbeat,
    detail = NULL
RETURNING worker_id, host, pid, pools, capabilities, status, registered_at, last_heartbeat, detail;

-- worker_status_for_update --
-- Worker $1's status, locked until the transaction ends (heartbeat, reap).
SELECT status FROM @hive.workers WHERE worker_id = $1 FOR UPDATE;

-- heartbeat --
-- Worker $2 is alive now.
UPDATE @hive.workers SET last_heartbeat = @hive.now_s($1) WHERE worker_id = $2
RETURNING worker_id, host, pid, pools, capabilities, status, registered_at, last_heartbeat, detail;

-- extend_worker_leases --
-- Every unexpired lease of worker $2, in every pool, runs for its own length again from now.
UPDATE @hive.items SET lease_expires_at = @hive.now_s($1) + lease_seconds
WHERE claimed_by = $2 AND state = 'claimed' AND lease_expires_at > @hive.now_s($1);

-- set_worker_status --
-- Worker $1 reports status $2 with detail $3.
UPDATE @hive.workers SET status = $2, detail = $3 WHERE worker_id = $1 RETURNING worker_id;

-- get_worker --
-- Worker $1's record.
SELECT worker_id, host, pid, pools, capabilities, status, registered_at, last_heartbeat, detail
FROM @hive.workers WHERE worker_id = $1;

-- list_workers --
-- Every worker (on host $1 when not NULL), oldest registration first.
SELECT worker_id, host, pid, pools, capabilities, status, registered_at, last_heartbeat, detail
FROM @hive.workers WHERE $1::text IS NULL OR host = $1 ORDER BY registered_at, worker_id;

-- silent_workers --
-- Workers neither lost nor stopped whose last heartbeat is more than $2 s old, locked
-- (SKIP LOCKED: a reaper running elsewhere takes the others).
SELECT worker_id, last_heartbeat, @hive.now_s($1) AS now FROM @hive.workers
WHERE status NOT IN ('lost', 'stopped') AND last_heartbeat < @hive.now_s($1) - $2
ORDER BY last_heartbeat, worker_id
FOR UPDATE SKIP LOCKED;

-- mark_lost --
-- Worker $1 is lost, with detail $2.
UPDATE @hive.workers SET status = 'lost', detail = $2 WHERE worker_id = $1;

-- state_put --
-- Set key $3 of namespace $2 to $4, expiring $5 s from now (NULL: never); the
-- namespace's expired keys go at the same time.
WITH swept AS (
    DELETE FROM @hive.shared_state WHERE namespace = $2 AND expires_at <= @hive.now_s($1) AND key <> $3
)
INSERT INTO @hive.shared_state (namespace, key, value, expires_at)
VALUES ($2, $3, $4, @hive.now_s($1) + $5)
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at;

-- state_get --
-- Key $3 of namespace $2, unless expired.
SELECT value FROM @hive.shared_state
WHERE namespace = $2 AND key = $3 AND (expires_at IS NULL OR expires_at > @hive.now_s($1));

-- state_scan --
-- Every unexpired key of namespace $2, by key.
SELECT key, value FROM @hive.shared_state
WHERE namespace = $2 AND (expires_at IS NULL OR expires_at > @hive.now_s($1)) ORDER BY key;

-- state_delete --
-- Delete key $3 of namespace $2; says whether it existed and had not expired.
DELETE FROM @hive.shared_state WHERE namespace = $2 AND key = $3
RETURNING expires_at IS NULL OR expires_at > @hive.now_s($1) AS live;

-- schema_exists --
-- Whether schema $1 exists in this database.
SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1);

-- schema_tables --
-- The tables and other relations in schema $1 (to tell ours from someone else's).
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY c.relname;

-- schema_owner_and_version --
-- Who owns the schema (the meta row) and the highest migration applied.
SELECT (SELECT value FROM @hive.meta WHERE key = 'owner') AS owner,
       (SELECT coalesce(max(version), 0) FROM @hive.migrations) AS version;

-- migration_lock --
-- Serialise migrations of schema $1 across every process until commit.
SELECT pg_advisory_xact_lock(hashtextextended('workhive-migrate:' || $1, 0));

-- record_migration --
-- Migration $1 was applied.
INSERT INTO @hive.migrations (version) VALUES ($1);

-- budget_rows --
-- Make sure budget keys $1 (sorted, so two takes insert in one order) have rows
-- to lock: a key never taken from gets one at -Infinity (as good as absent).
INSERT INTO @hive.budgets (key, tat)
SELECT key, '-Infinity'::float8 FROM unnest($1::text[]) AS key
ON CONFLICT (key) DO NOTHING;

-- budget_lock --
-- Lock budget keys $1 for this transaction, in key order, and read their times.
SELECT key, tat FROM @hive.budgets WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE;

-- budget_store --
-- Store the new theoretical arrival times $2 of budget keys $1.
INSERT INTO @hive.budgets (key, tat)
SELECT * FROM unnest($1::text[], $2::float8[])
ON CONFLICT (key) DO UPDATE SET tat = excluded.tat;

-- schedule_add --
-- A new schedule ($1 name .. $8 created_at, in workhive.schedules.Schedule's order);
-- a taken name inserts nothing (status INSERT 0 0).
INSERT INTO @hive.schedules (name, pool, cron, every, tz, payload, catch_up, created_at, last_tick)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL) ON CONFLICT (name) DO NOTHING;

-- schedule_get --
-- Schedule $1, every column in Schedule's order.
SELECT name, pool, cron, every, tz, payload, catch_up, created_at, last_tick FROM @hive.schedules WHERE name = $1;

-- schedule_list --
-- Every schedule by name, every column in Schedule's order.
SELECT name, pool, cron, every, tz, payload, catch_up, created_at, last_tick FROM @hive.schedules ORDER BY name;

-- schedule_remove --
-- Delete schedule $1.
DELETE FROM @hive.schedules WHERE name = $1;

-- schedule_fire --
-- Schedule $2 fires tick $3 (clock offset $1): if no tick at or after it was fired,
-- record it and push one pending item (payload $4, priority $5, max_attempts $6, delay
-- $7) to the schedule's pool, record the pool and its band (claims read a pool's
-- priorities from claim_bands) and wake its waiters on channel $8. One
-- statement: the UPDATE's row lock makes a concurrent fire of the same tick wait, then
-- see the tick recorded and push nothing. Returns the item's id and pool, or no row.
WITH fired AS (
    UPDATE @hive.schedules SET last_tick = $3
    WHERE name = $2 AND (last_tick IS NULL OR last_tick < $3)
    RETURNING pool
), new_item AS (
    INSERT INTO @hive.items (pool, payload, state, priority, max_attempts, created_at, available_at, dedup_key)
    SELECT fired.pool, $4, 'pending', $5, $6, @hive.now_s($1), @hive.now_s($1) + $7, NULL FROM fired
    RETURNING id, pool
), known AS (
    INSERT INTO @hive.pools (pool) SELECT pool FROM fired ON CONFLICT DO NOTHING
), bands AS (
    INSERT INTO @hive.claim_bands (pool, priority) SELECT pool, $5 FROM fired ON CONFLICT DO NOTHING
), woken AS (
    SELECT count(pg_notify($8, pool)) AS n FROM fired
)
SELECT new_item.id, new_item.pool FROM new_item CROSS JOIN woken;

-- step_put --
-- Store step $5 of item $2 of pool $3 under claim token $4: result $6, failed $7; 1 if
-- the claim is the item's current unexpired one, else 0 and nothing is written. A key
-- stored already keeps its first value. FOR SHARE holds the item's row until the commit:
-- no claim, completion or expiry takeover can pass between the check and the insert
-- (one that committed first is seen, and the claim no longer matches).
WITH claim AS (
    SELECT id, token FROM @hive.items
    WHERE id = $2 AND (pool = $3 AND state = 'claimed' AND token = $4 AND lease_expires_at > @hive.now_s($1)) IS TRUE
    FOR SHARE
), stored AS (
    INSERT INTO @hive.steps (item_id, key, payload, failed, token, stored_at)
    SELECT id, $5, $6, $7, token, @hive.now_s($1) FROM claim
    ON CONFLICT (item_id, key) DO NOTHING
)
SELECT count(*) FROM claim;

-- step_list --
-- The steps of item $1 of pool $2, in store order.
SELECT s.key, s.payload, s.failed, s.token, s.stored_at
FROM @hive.steps s JOIN @hive.items i ON i.id = s.item_id
WHERE s.item_id = $1 AND i.pool = $2
ORDER BY s.n;

-- step_clear --
-- Delete the steps of items $2 of pool $1 that are not live (pending or claimed).
DELETE FROM @hive.steps s USING @hive.items i
WHERE s.item_id = i.id AND i.id = ANY($2::bigint[]) AND i.pool = $1 AND i.state NOT IN ('pending', 'claimed');

-- pool_grouped --
-- Whether pool $1 has groups (a group_pools row: claims go through claim_grouped).
SELECT EXISTS (SELECT FROM @hive.group_pools WHERE pool = $1);

-- claim_grouped --
-- The claim of a pool with groups (migrations 0008, 0009): up to $5 items of pool $2 for worker
-- $3 with a lease of $4 s, in turn, within the limits; the rows of claim plus each item's
-- group, and its place in turn order (ord, migration 0012: the function returns its rows unsorted).
-- A spent expired lease met on the way is poisoned and returned with taken = false.
SELECT * FROM @hive.claim_grouped($1, $2, $3, $4, $5) ORDER BY ord;

-- complete_and_claim_grouped --
-- complete_and_claim for a pool with groups (migration 0008): complete item $3 of pool $2
-- (token $4, result $5) and, only if accepted, claim up to $8 items for worker $6 with a
-- lease of $7 s, in one call. No row: refused; else rows of (accepted, claim_grouped's row).
SELECT * FROM @hive.complete_and_claim_grouped($1, $2, $3, $4, $5, $6, $7, $8);

-- next_due_grouped --
-- next_due for a pool with groups (migration 0008).
SELECT @hive.next_due_grouped($1, $2);

-- group_set_weight --
-- Group $2 of pool $1 takes turns with weight $3 (the pool becomes grouped; settings are
-- kept before the group has items).
WITH grouped AS (
    INSERT INTO @hive.group_pools (pool) VALUES ($1) ON CONFLICT DO NOTHING
)
INSERT INTO @hive.groups AS old (pool, grp, weight, weight_set) VALUES ($1, $2, $3, true)
ON CONFLICT (pool, grp) DO UPDATE SET weight = excluded.weight, weight_set = true;

-- group_set_limit --
-- Group $2 of pool $1 holds at most $3 unexpired claims (NULL: no limit of its own).
-- Limits change between claims of the pool, never during one: the settings lock is taken
-- exclusive first (claims hold it shared; migration 0009 says why). A limit marks the group's
-- claims in flight counted (migration 0012).
SELECT @hive.set_group_limit($1, $2, $3);

-- group_set_default_limit --
-- Every named group of pool $1 without a limit of its own holds at most $2 unexpired claims (NULL: none).
-- Under the settings lock, as group_set_limit; marks every named group's claims in flight counted.
SELECT @hive.set_default_group_limit($1, $2);

-- pool_set_limit --
-- Pool $1 holds at most $2 unexpired claims (NULL: no limit). Under the settings lock, as group_set_limit.
WITH settled AS (
    SELECT pg_advisory_xact_lock(@hive.group_settings_key($1))
)
INSERT INTO @hive.group_pools (pool, pool_limit) SELECT $1, $2 FROM settled
ON CONFLICT (pool) DO UPDATE SET pool_limit = excluded.pool_limit;

-- group_pause --
-- Claims of pool $2 skip group $3 until $4 s from now on the hive's clock (NULL: resume now).
WITH grouped AS (
    INSERT INTO @hive.group_pools (pool) VALUES ($2) ON CONFLICT DO NOTHING
)
INSERT INTO @hive.groups AS old (pool, grp, paused_until) VALUES ($2, $3, @hive.now_s($1) + $4::float8)
ON CONFLICT (pool, grp) DO UPDATE SET paused_until = excluded.paused_until;

-- group_pool_settings --
-- Pool $1's limit and default group limit (no row: neither).
SELECT pool_limit, default_limit FROM @hive.group_pools WHERE pool = $1;

-- group_report --
-- Per group of pool $2 ('' = the ungrouped items) that has live items or a row in groups:
-- its weight, whether the weight was set, its own limit, pause end, claims in flight (unexpired), ready items (pending and
-- due, or expired claims with attempts left), waiting items (pending, not yet due), and the
-- hive's clock. Counts the pool's live items once (a report, not a claim).
WITH clock AS (
    SELECT @hive.now_s($1) AS at
), counts AS (
    SELECT grp,
        count(*) FILTER (WHERE state = 'claimed' AND lease_expires_at > clock.at) AS in_flight,
        count(*) FILTER (WHERE (state = 'pending' AND available_at <= clock.at)
            OR (state = 'claimed' AND lease_expires_at <= clock.at AND attempts < max_attempts)) AS ready,
        count(*) FILTER (WHERE state = 'pending' AND available_at > clock.at) AS waiting
    FROM @hive.items CROSS JOIN clock
    WHERE pool = $2 AND state IN ('pending', 'claimed')
    GROUP BY grp
), settings AS (
    SELECT grp, weight, weight_set, lim, paused_until FROM @hive.groups WHERE pool = $2
)
SELECT coalesce(counts.grp, settings.grp) AS grp, coalesce(settings.weight, 1) AS weight,
    coalesce(settings.weight_set, false), settings.lim,
    settings.paused_until, coalesce(counts.in_flight, 0), coalesce(counts.ready, 0), coalesce(counts.waiting, 0),
    (SELECT at FROM clock)
FROM counts FULL JOIN settings ON settings.grp = counts.grp
ORDER BY 1;
