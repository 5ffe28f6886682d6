-- pglogq._queue(queue_name): the queue row, or an error.
-- Parameters: queue_name  the queue's name
-- Returns:    pglogq.queue row.
-- Raises:     PQ001 unknown queue (with the closest existing name as a hint).
-- Tables:     queue (read).
CREATE OR REPLACE FUNCTION pglogq._queue(queue_name text)
RETURNS pglogq.queue LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    near text;
BEGIN
    SELECT * INTO q FROM pglogq.queue WHERE queue.queue_name = _queue.queue_name;
    IF NOT FOUND THEN
        SELECT x.queue_name INTO near FROM pglogq.queue x
         WHERE lower(x.queue_name) = lower(_queue.queue_name)
            OR x.queue_name LIKE left(_queue.queue_name, 3) || '%'
         ORDER BY x.queue_name LIMIT 1;
        RAISE EXCEPTION 'unknown queue "%"', left(queue_name, 80)
            USING ERRCODE = 'PQ001',
                  HINT = CASE WHEN near IS NOT NULL THEN format('did you mean "%s"?', near)
                              ELSE 'pglogq.queue_info() lists the queues' END;
    END IF;
    RETURN q;
END $$;
