-- pglogq.maint_compact_head(): compact tick_head, the one row a queue of its last tick.
-- Parameters: none.
-- Returns:    true if compacted; false if its lock was not granted within 100 ms (the caller's
--             lock_timeout when shorter: then the next switch's), or the call is not in a READ
--             COMMITTED transaction (a snapshot older than the lock would write old rows back).
-- Raises:     nothing of its own.
-- Tables:     tick_head (read, TRUNCATEd, its rows written back as they were).
-- Every tick updates its queue's row, and while something holds the xmin horizon back each
-- update leaves a version that no VACUUM may free (a hundred a second under load: 0.66 MB a
-- minute at 1,000 events/s).  maint_operations lists this step with the metadata switch (every
-- 10 s while the horizon is held, else every 5 minutes), to run in a transaction of its own:
-- under the switch's locks on the tick slots it waited for the ticker (a tick reads tick_head,
-- then its tick table), was refused at almost every switch and stalled the tick meanwhile.
-- TRUNCATE is not MVCC-safe: a reader whose snapshot predates the commit finds no row, and every
-- reader takes a missing row for "not known" and reads the queue's ticks instead.
CREATE OR REPLACE FUNCTION pglogq.maint_compact_head()
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    heads pglogq.tick_head[];
    old_timeout text := current_setting('lock_timeout');
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN false;
    END IF;
    IF old_timeout::interval = interval '0' OR old_timeout::interval > interval '100 ms' THEN
        PERFORM set_config('lock_timeout', '100ms', true);
    END IF;
    BEGIN
        LOCK TABLE pglogq.tick_head IN ACCESS EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', old_timeout, true);
        RETURN false;
    END;
    PERFORM set_config('lock_timeout', old_timeout, true);
    -- read after the lock: every tick before it committed, none after it started
    heads := ARRAY(SELECT h FROM pglogq.tick_head h);
    TRUNCATE pglogq.tick_head;
    INSERT INTO pglogq.tick_head SELECT * FROM unnest(heads);
    RETURN true;
END $$;
