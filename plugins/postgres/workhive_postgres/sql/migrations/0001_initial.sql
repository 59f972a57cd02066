-- Schema version 1: items, workers, shared state, locks, and the bookkeeping
-- that marks this schema as a workhive store. Runs with search_path set to
-- the hive's own schema, so every object below is created there and nowhere else.
-- Times are seconds since the epoch (float8) on the server's clock (now_s).

-- Marks the schema as ours: a schema without this table (and its owner row)
-- but with tables in it belongs to something else and is never altered.
CREATE TABLE meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO meta (key, value) VALUES ('owner', 'workhive');

-- One row per applied migration: a version is applied once (the primary key),
-- under the migration advisory lock.
CREATE TABLE migrations (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The server clock plus the caller's offset (tests move time forward with it).
-- STABLE and inlined, so comparisons with it can use an index.
CREATE FUNCTION now_s(clock_offset float8) RETURNS float8
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT extract(epoch FROM statement_timestamp())::float8 + clock_offset $$;

-- Item numbers of the whole hive: ids are unique across pools and never reused.
CREATE SEQUENCE item_ids AS bigint;

CREATE TABLE items (
    id bigint PRIMARY KEY DEFAULT nextval('item_ids'),
    pool text NOT NULL,
    payload text NOT NULL,
    state text NOT NULL,
    priority integer NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    token bigint NOT NULL DEFAULT 0,
    created_at float8 NOT NULL,
    available_at float8 NOT NULL,
    claimed_by text,
    lease_expires_at float8,
    lease_seconds float8,
    dedup_key text,
    error text,
    result text,
    finished_at float8,
    releases integer NOT NULL DEFAULT 0
);
ALTER SEQUENCE item_ids OWNED BY items.id;

-- Ready items in claim order: a claim reads the first rows with
-- available_at <= now and locks them with SKIP LOCKED, O(limit log n).
CREATE INDEX items_ready ON items (pool, priority DESC, available_at, id) WHERE state = 'pending';
-- Items in flight: expired leases (claimable again), heartbeats, reaping.
CREATE INDEX items_leases ON items (pool, lease_expires_at) WHERE state = 'claimed';
-- Finished items: listing dead items, purging by finish time, counting.
CREATE INDEX items_finished ON items (pool, state, finished_at) WHERE state IN ('done', 'poisoned');
-- Live dedup keys only.
CREATE INDEX items_dedup ON items (pool, dedup_key) WHERE dedup_key IS NOT NULL AND state IN ('pending', 'claimed');

-- Every pool ever pushed to (pools() keeps those that still have items).
CREATE TABLE pools (
    pool text PRIMARY KEY
);

CREATE TABLE workers (
    worker_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    pools text[] NOT NULL,
    capabilities text[] NOT NULL,
    status text NOT NULL,
    registered_at float8 NOT NULL,
    last_heartbeat float8 NOT NULL,
    detail text
);

CREATE TABLE shared_state (
    namespace text NOT NULL,
    key text NOT NULL,
    value text NOT NULL,
    expires_at float8,
    PRIMARY KEY (namespace, key)
);

-- Fleet-wide locks: the holder is whoever holds the session advisory lock
-- (schema key, id); this row keeps the fencing token (it only rises) and the
-- holder's details for waiters and `workhive locks`.
CREATE TABLE locks (
    id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Any Python str names a lock (NUL, lone surrogates, 10 KB): kept as
    -- UTF-8 bytes (surrogatepass), found by their SHA-256.
    name_hash bytea NOT NULL UNIQUE,
    name bytea NOT NULL,
    token bigint NOT NULL DEFAULT 0,
    held boolean NOT NULL DEFAULT false,
    pid integer,
    host text,
    worker_id text,
    acquired_at float8,
    ttl float8,
    backend_pid integer
);
