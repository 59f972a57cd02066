-- Version 8: groups (issue 28; workhive.storage.ServesGroups, rules GR1-GR9).
--
-- An item may carry a group (a tenant). Claims in a pool that uses groups serve
-- the ready groups in turn (weighted), with limits on claims in flight per group
-- and per pool. A pool that never used groups pays nothing for them: its items
-- keep grp NULL, enter none of the group indexes, and fire no group trigger.
--
-- A pool "uses groups" from the first grouped push or group setting on: it gets a
-- group_pools row (never deleted, so a process may remember it), and from then on
-- every item of it carries a non-NULL grp, '' standing for the ungrouped items
-- (a group name is never empty), which take their turns as one group.
ALTER TABLE items ADD COLUMN grp TEXT;

-- A group's pending items in claim order: its next item is one probe.
CREATE INDEX items_group_ready ON items (pool, grp, priority DESC, available_at, id)
    WHERE state = 'pending' AND grp IS NOT NULL;

-- One row per pool that uses groups: its own limit on claims in flight, the
-- default limit of named groups, and the pool's virtual time (turns). The pool's
-- claims are not counted here: only a pool with a limit needs the count, and it
-- is read off items_leases (at most about the limit entries) rather than kept
-- in a row every claim and completion of every grouped pool would rewrite.
CREATE TABLE group_pools (
    pool TEXT PRIMARY KEY,
    lim INTEGER,
    default_lim INTEGER,
    vt REAL NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- One row per group that has had items or settings. head is the highest priority
-- among its pending items (NULL: none pending), inflight how many of its items are
-- claimed; both are kept by the triggers below. weight_set is 1 once a weight
-- was set: the report lists a group with a weight set, a limit of its own or a
-- pause in the future even when it has no items.
CREATE TABLE groups (
    pool TEXT NOT NULL,
    grp TEXT NOT NULL,
    weight REAL NOT NULL DEFAULT 1,
    lim INTEGER,
    vt REAL NOT NULL DEFAULT 0,
    paused_until REAL,
    head INTEGER,
    inflight INTEGER NOT NULL DEFAULT 0,
    weight_set INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (pool, grp)
) WITHOUT ROWID;

-- The turn order of the groups that have pending items: highest priority first,
-- then the smallest virtual time. A claim reads it from the front and stops at
-- the first group that can be served, so idle groups are never looked at.
CREATE INDEX groups_turns ON groups (pool, head DESC, vt, grp) WHERE head IS NOT NULL;

-- A grouped item is pushed: its group exists and its head may rise.
CREATE TRIGGER groups_item_pushed AFTER INSERT ON items
WHEN NEW.grp IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO groups (pool, grp) VALUES (NEW.pool, NEW.grp);
    UPDATE groups SET head = CASE WHEN head IS NULL OR head < NEW.priority THEN NEW.priority ELSE head END
    WHERE pool = NEW.pool AND grp = NEW.grp;
END;

-- A grouped item changes state: the group's count of claims in flight follows,
-- and its head is raised (an item became pending) or read again off
-- items_group_ready (one left pending), O(log n) either way.
CREATE TRIGGER groups_item_moved AFTER UPDATE OF state ON items
WHEN NEW.grp IS NOT NULL AND OLD.state IS NOT NEW.state
BEGIN
    UPDATE groups SET
        inflight = inflight + (NEW.state = 'claimed') - (OLD.state = 'claimed'),
        head = CASE
            WHEN NEW.state = 'pending' THEN
                CASE WHEN head IS NULL OR head < NEW.priority THEN NEW.priority ELSE head END
            WHEN OLD.state = 'pending' THEN
                (SELECT max(priority) FROM items INDEXED BY items_group_ready
                 WHERE pool = NEW.pool AND grp = NEW.grp AND state = 'pending')
            ELSE head END
    WHERE pool = NEW.pool AND grp = NEW.grp;
END;
