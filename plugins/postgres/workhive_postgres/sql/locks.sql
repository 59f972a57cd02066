-- The statements of the fleet-wide lock provider, in the same `-- name --`
-- format as queries.sql. Each lock is a session advisory lock on the pair
-- (schema key, lock id) held by the holder's own connection: the server frees
-- it the moment that connection ends (a crashed holder, a dead machine once
-- TCP keepalive gives up), and a waiter blocked in pg_advisory_lock is woken by
-- the server when it frees, with no polling. The locks table keeps the fencing
-- token and who holds it. The locks table is written `@hive.locks`, as in queries.sql.

-- lock_row --
-- The id of the lock named $2 (hash $1), created on first use.
WITH created AS (
    INSERT INTO @hive.locks (name_hash, name) VALUES ($1, $2) ON CONFLICT (name_hash) DO NOTHING RETURNING id
)
SELECT id FROM created UNION ALL SELECT id FROM @hive.locks WHERE name_hash = $1;

-- try_lock --
-- Take advisory lock ($1, $2) if it is free.
SELECT pg_try_advisory_lock($1, $2);

-- wait_lock --
-- Take advisory lock ($1, $2), waiting for it (bounded by the session's lock_timeout).
SELECT pg_advisory_lock($1, $2);

-- unlock --
-- Give advisory lock ($1, $2) back.
SELECT pg_advisory_unlock($1, $2);

-- set_lock_timeout --
-- How long wait_lock may wait ($1, e.g. '1500ms'; '0' waits forever).
SELECT set_config('lock_timeout', $1, false);

-- record_holder --
-- This session now holds lock $1 (under the advisory lock): the token rises, and
-- the holder's details are written for others to read. Returns the token and the time.
UPDATE @hive.locks SET token = token + 1, held = true, pid = $2, host = $3, worker_id = $4,
    acquired_at = extract(epoch FROM clock_timestamp()), ttl = $5, backend_pid = pg_backend_pid()
WHERE id = $1
RETURNING token, acquired_at;

-- clear_holder --
-- Lock $1 is released by this session (only if this session's token $2 is still the current one).
UPDATE @hive.locks SET held = false WHERE id = $1 AND token = $2 AND backend_pid = pg_backend_pid();

-- holders --
-- Locks whose row says held and whose advisory lock is really held by a live session
-- (a crashed holder's row may still say held: the server already freed its lock).
-- Lock named $2 (hash $2) only, or every lock when $2 is NULL; $1 is the schema key.
SELECT l.name, l.token, l.pid, l.host, l.worker_id, l.acquired_at, l.ttl FROM @hive.locks l
WHERE l.held AND ($2::bytea IS NULL OR l.name_hash = $2)
    AND EXISTS (
        SELECT FROM pg_locks p
        WHERE p.locktype = 'advisory' AND p.granted AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND p.classid = $1::oid AND p.objid = l.id::oid AND p.objsubid = 2 AND p.pid = l.backend_pid);
