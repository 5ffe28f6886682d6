-- pglogq.maint_rotate_history(force): rotate the outcome log (job history), so that it keeps what
-- history_retention asks and never piles up dead tuples.
-- Parameters: force  switch now, even if the switch is not due (tests, an operator emptying the
--             oldest third of the log)
-- Returns:    true if the history epoch was switched (the oldest slot emptied), false if not due,
--             another session is switching it, or the slot's lock was not granted within 100 ms
--             (the next pass tries again).
-- Raises:     nothing of its own.
-- Tables:     outcome (the oldest slot TRUNCATEd), queue (read).
-- The history epoch is the sequence pglogq.history_epoch (history_epoch_time: the unix time of the
-- last switch); an outcome goes to slot epoch % 3.  A switch from epoch e to e + 1 empties slot
-- (e + 1) % 3, written during epoch e - 2, and is due when half the longest history_retention of
-- any queue has passed since the last switch (at least 10 seconds): the emptied rows are then at
-- least a retention old, and no row lives longer than 1.5 retentions.  Readers (lookup, jobs,
-- result) leave out rows older than their queue's own retention, so a queue with a shorter one
-- shows exactly its own.  The slot is emptied before the epoch moves: a record_outcomes that reads
-- the new epoch waits for the TRUNCATE's lock and writes into the emptied slot.  A transaction
-- holding a snapshot from before the TRUNCATE sees the slot empty (TRUNCATE is not MVCC-safe): it
-- loses history at least a retention old, nothing else.
CREATE OR REPLACE FUNCTION pglogq.maint_rotate_history(force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    e bigint;
    old_timeout text;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('pglogq.history'), 0) THEN
        RETURN false;
    END IF;
    IF NOT coalesce(force, false) AND NOT pglogq._history_due() THEN
        RETURN false;
    END IF;
    e := coalesce(pg_sequence_last_value('pglogq.history_epoch'), 0);
    old_timeout := current_setting('lock_timeout');
    IF old_timeout::interval = interval '0' OR old_timeout::interval > interval '100 ms' THEN
        PERFORM set_config('lock_timeout', '100ms', true);
    END IF;
    BEGIN
        EXECUTE format('TRUNCATE pglogq.%I', 'outcome_' || ((e + 1) % 3));
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', old_timeout, true);
        RETURN false;
    END;
    PERFORM set_config('lock_timeout', old_timeout, true);
    PERFORM setval('pglogq.history_epoch', e + 1, true);
    PERFORM setval('pglogq.history_epoch_time', extract(epoch FROM clock_timestamp())::bigint, true);
    RETURN true;
END $$;
