-- Version 2: finished items leave the hot path; rows are counted per pool.

-- Completing an item was three page writes: the row, its entry leaving
-- items_leases, and a new entry in items_finished. Finished items now have no
-- index on the hot path: done items none at all, poisoned ones (rare, and
-- listed and requeued by pool) a small one of their own. Each commit appends
-- every page it dirtied to the WAL, so this is a sixth of a claim+complete.
DROP INDEX items_finished;
CREATE INDEX items_poisoned ON items (pool, id) WHERE state = 'poisoned';

-- Rows per pool, kept by push and purge (nothing else adds or deletes rows),
-- so stats() counts done items as total minus the indexed live and poisoned
-- ones, in O(live) rather than a table scan, and pools() is one small read.
CREATE TABLE pools (
    pool TEXT PRIMARY KEY,
    items INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO pools (pool, items) SELECT pool, count(*) FROM items GROUP BY pool;
