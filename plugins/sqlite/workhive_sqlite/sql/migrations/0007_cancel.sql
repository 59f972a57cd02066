-- Version 7: cancelled items (Pool.cancel). A cancelled item is finished like a
-- done or poisoned one; like poisoned ones (rare, listed and requeued by pool) it
-- has a small index of its own, so stats() counts it without a table scan and
-- done items stay the rest of the pool's rows.
CREATE INDEX items_cancelled ON items (pool, id) WHERE state = 'cancelled';
