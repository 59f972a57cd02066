-- Schema version 6: durable steps (ctx.step; workhive.storage.KeepsSteps, rules ST1-ST5).
--
-- One row per (item, step key). n is the store order: an item's steps read back
-- in the order they were stored. The pool is the item's, checked through items
-- on every read and write. A step goes with its item (ON DELETE CASCADE), so
-- purge, which deletes items, needs no statement of its own for them; the
-- unique key's index serves both the cascade and reading an item's steps.
CREATE TABLE steps (
    n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item_id bigint NOT NULL REFERENCES items (id) ON DELETE CASCADE,
    key text NOT NULL,
    payload text NOT NULL,
    failed boolean NOT NULL,
    token bigint NOT NULL,
    stored_at float8 NOT NULL,
    UNIQUE (item_id, key)
);
