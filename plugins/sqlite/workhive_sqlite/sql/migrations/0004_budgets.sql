-- Version 4: fleet rate budgets (workhive.budgets): the theoretical arrival
-- time of each credential's budget dimension, on hive time.
CREATE TABLE budgets (
    key TEXT PRIMARY KEY,
    tat REAL NOT NULL
) WITHOUT ROWID;
