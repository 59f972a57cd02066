-- Version 12: the groups' trigger starts only for moves it may have work in.
--
-- SQLite starts the program of every trigger on `UPDATE OF state` for every row
-- an UPDATE that assigns state touches, whatever its WHEN says: every claimed row
-- and every completion paid about 13,000 instructions for it (callgrind, raw
-- sqlite3: a completion 50,600 with the trigger, 37,600 without), in pools without
-- groups too, where its WHEN is always false, and in grouped pools, where a claim
-- counts its turns itself (take_turns) and a completion has nothing to do unless
-- claims are counted (group_pools.counted).
--
-- So the trigger follows a column of its own: `moves`, which every statement that
-- moves an item's state assigns (moves + 1, so it also counts them), but for the
-- claims and one of the two completions (complete_quiet, which the backend runs
-- only inside a transaction that read the pool's counted flag as 0). The body is
-- version 10's. test_sqlite_schema checks the rule over every statement of
-- queries.sql.
ALTER TABLE items ADD COLUMN moves INTEGER NOT NULL DEFAULT 0;

DROP TRIGGER groups_item_moved;

CREATE TRIGGER groups_item_moved AFTER UPDATE OF moves ON items
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
