-- pglogq without a ticker process: ticks and maintenance scheduled by pg_cron.
--
-- For people who cannot run pglogq-ticker next to the database.  Needs pg_cron >= 1.5 (second
-- intervals) in the database that holds the pglogq schema (or schedule from the cron database
-- with cron.schedule_in_database), and a role with pglogq_admin.  Install:
--
--     pglogq psql -v ON_ERROR_STOP=1 -f ticker/pg_cron.sql    (or: psql "$(pglogq dsn)" ...)
--
-- then pick ONE of the two ticking options at the end.  Remove everything with:
--
--     SELECT cron.unschedule(jobname) FROM cron.job WHERE jobname LIKE 'pglogq-%';
--     DROP SCHEMA pglogq_cron CASCADE;
--
-- Latency: pg_cron cannot run a job more than once a second, so option A delivers an event
-- within about 1 s (0.5 s on average).  Option B keeps one pg_cron worker busy with a loop that
-- ticks every 10 ms while events flow and every 200 ms when idle, like the daemon.  Both use the
-- daemon's lock: they stand by (do nothing) while a pglogq-ticker daemon is active, and the
-- daemon stands by while the loop runs.
--
-- Maintenance (retry/delayed pump, rotation step 1 then step 2, pruning, idempotency-key
-- expiry) must run with each step in its own transaction; pglogq_cron.maintain() commits after
-- every step.  Never schedule only `SELECT pglogq.maint_run('rotate_step1', ...)`: rotation
-- happens once and then never again without step 2.

CREATE SCHEMA IF NOT EXISTS pglogq_cron;
REVOKE ALL ON SCHEMA pglogq_cron FROM PUBLIC;

-- The daemon's lock key (pglogq.tickerd.queries.LOCK_KEY): one active ticker per database.
CREATE OR REPLACE FUNCTION pglogq_cron.lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT 8099561680581754881::bigint $$;

-- One maintenance pass: the restore check, then every due step in its own transaction.
CREATE OR REPLACE PROCEDURE pglogq_cron.maintain()
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    rotated integer;
BEGIN
    PERFORM set_config('lock_timeout', '1s', false);
    PERFORM set_config('statement_timeout', '30s', false);
    -- refuses (PQ040) a database restored into a cluster whose txids are behind: the job fails
    -- and cron.job_run_details says why
    PERFORM pglogq.ticker_check(true);
    COMMIT;
    FOR r IN SELECT m.op, m.queue_name FROM pglogq.maint_operations() m LOOP
        rotated := pglogq.maint_run(r.op, r.queue_name);
        COMMIT;
        IF r.op = 'rotate_step1' AND rotated = 1 THEN
            PERFORM pglogq.maint_run('rotate_step2', r.queue_name);
            COMMIT;
        END IF;
    END LOOP;
END $$;

-- Tick in a loop for about run_for, each tick in its own transaction: every `busy` while ticks
-- are written, doubling up to `idle` when nothing happens.  Returns at once when another ticker
-- (a daemon, or the previous run of this job) holds the lock.
CREATE OR REPLACE PROCEDURE pglogq_cron.tick_loop(
    run_for interval DEFAULT '59 seconds',
    busy interval DEFAULT '10 milliseconds',
    idle interval DEFAULT '200 milliseconds')
LANGUAGE plpgsql AS $$
DECLARE
    stop_at timestamptz := clock_timestamp() + run_for;
    pause interval := busy;
    n integer;
BEGIN
    IF NOT pg_try_advisory_lock(pglogq_cron.lock_key()) THEN
        RETURN;
    END IF;
    -- a tick needs no WAL flush of its own (see pglogq.tickerd.settings: tick_synchronous_commit)
    PERFORM set_config('synchronous_commit', 'off', false);
    -- on an error the job's session ends, which releases the lock
    WHILE clock_timestamp() < stop_at LOOP
        n := pglogq.ticker();
        COMMIT;
        IF n > 0 THEN
            pause := busy;
        ELSE
            pause := least(pause * 2, idle);
        END IF;
        PERFORM pg_sleep(extract(epoch FROM pause));
    END LOOP;
    PERFORM pg_advisory_unlock(pglogq_cron.lock_key());
END $$;

-- One tick pass under the lock (option A).
CREATE OR REPLACE PROCEDURE pglogq_cron.tick_once()
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_try_advisory_lock(pglogq_cron.lock_key()) THEN
        PERFORM pglogq.ticker();
        PERFORM pg_advisory_unlock(pglogq_cron.lock_key());
    END IF;
END $$;

-- Maintenance every 5 seconds (both options).
SELECT cron.schedule('pglogq-maintenance', '5 seconds', 'CALL pglogq_cron.maintain()');

-- Option A, simple: tick once a second (an event waits up to ~1 s for its tick).
SELECT cron.schedule('pglogq-ticker', '1 seconds', 'CALL pglogq_cron.tick_once()');

-- Option B, low latency: a loop started every minute that ticks every 10-200 ms for 59 s.
-- It occupies one pg_cron worker (cron.max_running_jobs) all the time.  To use it instead of A:
--     SELECT cron.unschedule('pglogq-ticker');
--     SELECT cron.schedule('pglogq-ticker-loop', '* * * * *', 'CALL pglogq_cron.tick_loop()');
