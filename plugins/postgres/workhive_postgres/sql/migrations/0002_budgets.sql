-- Schema version 2: fleet rate budgets (workhive.budgets). One row per
-- credential and budget dimension ("NAME#fingerprint:rpm"): its theoretical
-- arrival time (GCRA), seconds since the epoch on the hive's clock. A row at
-- -Infinity is a key never taken from (take_budget inserts it to lock it).
CREATE TABLE budgets (
    key text PRIMARY KEY,
    tat float8 NOT NULL
);
