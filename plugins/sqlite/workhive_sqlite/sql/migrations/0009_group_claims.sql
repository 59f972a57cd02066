-- Version 9: a claim by turns keeps its groups' counters itself (workhive_sqlite.groups).
--
-- Under version 8 every item a claim took fired groups_item_moved: one UPDATE of
-- its group's row (and of that row's groups_turns entry) per item, inside the
-- claim's write transaction. A claim by turns knows how many items each group it
-- served took, so it now writes each served group's row once (group_took_turns:
-- its vt, inflight + n, and its head read again); the trigger no longer fires for
-- pending -> claimed. A grouped pool is claimed only by turns (the plain claims
-- check group_pools under the write lock), so no other statement makes that move.
--
-- An item leaving a claim for good (done, failed, poisoned, cancelled) changes
-- only its group's count of claims in flight: its own trigger updates just that
-- column, so the groups_turns index (head, vt) is not rewritten per completion.
DROP TRIGGER groups_item_moved;

CREATE TRIGGER groups_item_moved AFTER UPDATE OF state ON items
WHEN NEW.grp IS NOT NULL AND OLD.state IS NOT NEW.state
    AND NOT (OLD.state = 'pending' AND NEW.state = 'claimed')
    AND NOT (OLD.state = 'claimed' AND NEW.state IS NOT 'pending')
BEGIN
    UPDATE groups SET
        inflight = inflight - (OLD.state = 'claimed'),
        head = CASE
            WHEN NEW.state = 'pending' THEN
                CASE WHEN head IS NULL OR head < NEW.priority THEN NEW.priority ELSE head END
            WHEN OLD.state = 'pending' THEN
                (SELECT max(priority) FROM items INDEXED BY items_group_ready
                 WHERE pool = NEW.pool AND grp = NEW.grp AND state = 'pending')
            ELSE head END
    WHERE pool = NEW.pool AND grp = NEW.grp;
END;

CREATE TRIGGER groups_item_finished AFTER UPDATE OF state ON items
WHEN NEW.grp IS NOT NULL AND OLD.state = 'claimed' AND NEW.state NOT IN ('claimed', 'pending')
BEGIN
    UPDATE groups SET inflight = inflight - 1 WHERE pool = NEW.pool AND grp = NEW.grp;
END;
