-- Schema version 4: schedules (workhive.schedules): recurring items, one row each.
-- last_tick is the latest tick fired (seconds since the epoch on the hive's clock):
-- schedule_fire moves it forward and pushes the tick's item in one statement, so a
-- tick is pushed once however many supervisors fire it.
CREATE TABLE schedules (
    name text PRIMARY KEY,
    pool text NOT NULL,
    cron text,
    every float8,
    tz text NOT NULL,
    payload text NOT NULL,
    catch_up integer NOT NULL,
    created_at float8 NOT NULL,
    last_tick float8
);
