-- Version 6: durable steps (ctx.step; workhive.storage.KeepsSteps, rules ST1-ST5).
--
-- One row per (item, step key). n (the rowid) is the store order: a new row's
-- rowid is above every existing one, so an item's steps read back in the order
-- they were stored. The pool is the item's, checked through items on each
-- read and write, never copied here.
CREATE TABLE steps (
    n INTEGER PRIMARY KEY,
    item_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    payload TEXT NOT NULL,
    failed INTEGER NOT NULL,
    token INTEGER NOT NULL,
    stored_at REAL NOT NULL,
    UNIQUE (item_id, key)
);

-- Steps go with their item, however it is deleted (purge deletes items one by
-- one): no statement that deletes items needs to know about steps.
CREATE TRIGGER steps_go_with_their_item AFTER DELETE ON items
BEGIN
    DELETE FROM steps WHERE item_id = OLD.id;
END;
