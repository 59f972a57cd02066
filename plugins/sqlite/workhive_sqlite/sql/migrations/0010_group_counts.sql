-- Version 10: claims in flight are counted per group only where a limit needs them,
-- and one trigger follows an item's moves (workhive_sqlite.groups).
--
-- Under version 9 every completion of a grouped item rewrote its group's row
-- (inflight - 1): one page more in the commit of every grouped completion, 3
-- against an ungrouped one's 2, although only a group limit (its own, or the
-- pool's default for named groups) ever reads the count. group_pools.counted is
-- 1 while some group of the pool has a limit: only then do claims and the
-- trigger keep inflight. Setting the first limit of a pool counts every group's
-- claims once, off items_leases, in the same write transaction (groups.py,
-- _set); lifting the last one stops the counting. A pool limit needs no group
-- count (it counts items_leases).
--
-- The two triggers on items' state became one. SQLite starts the program of
-- every trigger on `UPDATE OF state` for every row updated, whatever its WHEN
-- says (version 9's two cost an ungrouped claim+complete about 18,000
-- instructions of 225,000, callgrind, raw sqlite3), but a start costs more the
-- larger the program: one trigger doing both jobs measured the same within 1%
-- as the two, and the two each reading group_pools.counted 2% more. So one.
ALTER TABLE group_pools ADD COLUMN counted INTEGER NOT NULL DEFAULT 0;

-- Version 9 kept every count exact: a pool with a limit keeps its counts as they are.
UPDATE group_pools SET counted = 1
WHERE default_lim IS NOT NULL
   OR EXISTS (SELECT 1 FROM groups WHERE groups.pool = group_pools.pool AND groups.lim IS NOT NULL);

DROP TRIGGER groups_item_moved;
DROP TRIGGER groups_item_finished;

-- A grouped item changes state, but for a claim (which take_turns counts itself):
-- leaving a claim for good (done, failed, poisoned, cancelled) only lowers its
-- group's count of claims in flight, and only where counts are kept (the row,
-- and the groups_turns index, are not rewritten per completion otherwise); any
-- other move raises its group's head (an item became pending) or reads it again
-- off items_group_ready (one left pending), O(log n) either way, and lowers the
-- count when the item left a claim and counts are kept.
CREATE TRIGGER groups_item_moved AFTER UPDATE OF state ON items
WHEN NEW.grp IS NOT NULL AND OLD.state IS NOT NEW.state
    AND NOT (OLD.state = 'pending' AND NEW.state = 'claimed')
BEGIN
    UPDATE groups SET inflight = inflight - 1
    WHERE pool = NEW.pool AND grp = NEW.grp
        AND OLD.state = 'claimed' AND NEW.state IS NOT 'pending'
        AND (SELECT counted FROM group_pools WHERE pool = NEW.pool);
    UPDATE groups SET
        inflight = inflight - (OLD.state = 'claimed' AND (SELECT counted FROM group_pools WHERE pool = NEW.pool)),
        head = CASE
            WHEN NEW.state = 'pending' THEN
                CASE WHEN head IS NULL OR head < NEW.priority THEN NEW.priority ELSE head END
            WHEN OLD.state = 'pending' THEN
                (SELECT max(priority) FROM items INDEXED BY items_group_ready
                 WHERE pool = NEW.pool AND grp = NEW.grp AND state = 'pending')
            ELSE head END
    WHERE pool = NEW.pool AND grp = NEW.grp
        AND NOT (OLD.state = 'claimed' AND NEW.state IS NOT 'pending');
END;
