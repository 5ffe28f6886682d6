-- pglogq.schedule_count(queue_name): how many schedules a queue has (NULL: every queue).
-- Parameters: queue_name  or NULL
-- Returns:    the number of schedules.
-- Raises:     PQ001 unknown queue.
-- Tables:     schedule, queue (read).
-- A count over the schedule's unique index, for screens that list only the soonest few
-- (schedule_list with max_rows) and say how many more there are.
CREATE OR REPLACE FUNCTION pglogq.schedule_count(queue_name text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF queue_name IS NULL THEN
        RETURN (SELECT count(*) FROM pglogq.schedule s);
    END IF;
    RETURN (SELECT count(*) FROM pglogq.schedule s WHERE s.queue_id = (pglogq._queue(queue_name)).queue_id);
END $$;
