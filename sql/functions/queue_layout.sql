-- pglogq.queue_layout(queue_name): how a queue stores and hands out its events.
-- Parameters: queue_name
-- Returns:    one row: partitions (1: one ordered log), urgent_lane (see set_queue_config).
-- Raises:     PQ001 unknown queue.
-- Tables:     queue (read).
CREATE OR REPLACE FUNCTION pglogq.queue_layout(queue_name text)
RETURNS TABLE (partitions integer, urgent_lane boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    RETURN QUERY SELECT q.partitions, q.urgent_lane;
END $$;
