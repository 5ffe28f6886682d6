-- pglogq.stored_events(queue_name): how many event rows the queue's tables hold now.
-- Parameters: queue_name
-- Returns:    the number of rows in every event table of the queue: events not yet rotated
--             away, with retried and replayed copies (delayed events not yet due, retries not
--             yet pumped and dead letters are not counted).  It counts (reads the tables); for a
--             cheap estimate use queue_info's size_bytes.
-- Raises:     PQ001 unknown queue.
-- Tables:     event (read).
-- Plans: custom (plan_cache_mode), so that each read of the event and tick tables is planned with
-- the queue's id and reads and locks that queue's partitions only (after five calls a generic
-- plan was chosen, which covers and locks every queue's partitions: cost and locks grew with
-- the number of queues).
CREATE OR REPLACE FUNCTION pglogq.stored_events(queue_name text)
RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    RETURN (SELECT count(*) FROM pglogq.event e WHERE e.ev_queue = q.queue_id);
END $$;
