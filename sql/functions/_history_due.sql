-- pglogq._history_due(): whether the outcome log's epoch switch is due (the one owner of that rule).
-- Parameters: none.
-- Returns:    true when half the longest history_retention of any queue (at least 10 seconds)
--             has passed since the last switch.
-- Raises:     nothing.
-- Tables:     queue (read).
-- maint_operations asks it on every pass (one read of the queue rows), maint_rotate_history
-- before it switches.  PL/pgSQL, for its cached plan (a SQL function with settings is planned
-- on every call).
CREATE OR REPLACE FUNCTION pglogq._history_due()
RETURNS boolean LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    RETURN extract(epoch FROM clock_timestamp()) - coalesce(pg_sequence_last_value('pglogq.history_epoch_time'), 0)
           >= greatest(10, extract(epoch FROM (SELECT max(q.history_retention) FROM pglogq.queue q)) / 2);
END $$;
