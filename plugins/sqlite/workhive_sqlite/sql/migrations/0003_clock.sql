-- Version 3: hive time's anchor for the current boot (see workhive_sqlite.clock): one row.
CREATE TABLE clock (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    boot_id TEXT NOT NULL,
    offset REAL NOT NULL,
    seen REAL NOT NULL
);
