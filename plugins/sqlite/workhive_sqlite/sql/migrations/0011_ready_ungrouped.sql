-- Version 11: items_ready holds ungrouped items only.
--
-- Under version 10 a grouped pending item had an entry in items_ready and one in
-- items_group_ready, though a pool that uses groups is only ever claimed off
-- the second (workhive_sqlite.groups): every grouped push and claim wrote a page
-- of each, and a claim of n items of n groups up to n pages of each, the groups'
-- items lying in different parts of the index. Every item of a pool that uses
-- groups has a group ('' for its ungrouped ones), and an item of a pool that
-- does not has none, so the two indexes now split the pending items between
-- them: the pool-wide counts and times (stats, the group report, wake-ups) read
-- both, each over its own part.
DROP INDEX items_ready;
CREATE INDEX items_ready ON items (pool, priority DESC, available_at, id) WHERE state = 'pending' AND grp IS NULL;
