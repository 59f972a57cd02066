-- Version 1: items, workers and shared state.

-- Item ids are the integer key (AUTOINCREMENT: never reused after a purge, so
-- an old id can never name a new item); the API shows them as strings.
CREATE TABLE items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    token INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    available_at REAL NOT NULL,
    claimed_by TEXT,
    lease_expires_at REAL,
    lease_seconds REAL,
    dedup_key TEXT,
    error TEXT,
    result TEXT,
    finished_at REAL,
    releases INTEGER NOT NULL DEFAULT 0
);

-- Every index below is partial and covers one stage of an item's life, so a
-- claim or a completion touches few pages: each commit appends every page it
-- dirtied to the WAL, and pages written, not rows, bound the claim rate.
--
-- Ready items in claim order: the next claimable item is the first entry
-- with available_at <= now, O(log n) however deep the backlog.
CREATE INDEX items_ready ON items (pool, priority DESC, available_at, id) WHERE state = 'pending';

-- Held items: expired leases (claimable again), heartbeats and reaping scan
-- only what is in flight.
CREATE INDEX items_leases ON items (pool, lease_expires_at) WHERE state = 'claimed';

-- Finished items: listing done/dead items and purging (dropped in version 2).
CREATE INDEX items_finished ON items (pool, state, id) WHERE state IN ('done', 'poisoned');

-- Live dedup keys only, so a key reused by a recurring job stays one probe.
-- Not UNIQUE: requeue may legitimately revive a poisoned twin of a live key;
-- push checks for a live duplicate under the write lock instead.
CREATE INDEX items_dedup ON items (pool, dedup_key) WHERE dedup_key IS NOT NULL AND state IN ('pending', 'claimed');

CREATE TABLE workers (
    worker_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pools TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    status TEXT NOT NULL,
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    detail TEXT
) WITHOUT ROWID;

CREATE TABLE shared_state (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at REAL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
