-- Version 5: schedules (workhive.schedules): recurring items, one row each. last_tick is
-- the latest tick fired (hive time): schedule_fire moves it forward and pushes the tick's
-- item in one transaction, so a tick is pushed once however many supervisors fire it.
CREATE TABLE schedules (
    name TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    cron TEXT,
    every REAL,
    tz TEXT NOT NULL,
    payload TEXT NOT NULL,
    catch_up INTEGER NOT NULL,
    created_at REAL NOT NULL,
    last_tick REAL
) WITHOUT ROWID;
