-- Schema version 7: cancelled items (Pool.cancel). A cancelled item is finished
-- like a done or poisoned one; purge ages it out by finished_at, off this index,
-- as it does done and poisoned ones off items_finished.
CREATE INDEX items_cancelled ON items (pool, finished_at) WHERE state = 'cancelled';
