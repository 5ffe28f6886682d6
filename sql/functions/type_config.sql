-- pglogq.type_config(queue_name): the per-type overrides of a queue (what set_type_config changes).
-- Parameters: queue_name
-- Returns:    one row per event type with an override: type, max_retries, retry_delay,
--             retry_factor, retry_cap, retry_jitter (NULL: the queue's setting applies), by type.
-- Raises:     PQ001 unknown queue.
-- Tables:     type_config (read).
CREATE OR REPLACE FUNCTION pglogq.type_config(queue_name text)
RETURNS TABLE (type text, max_retries integer, retry_delay interval, retry_factor double precision,
               retry_cap interval, retry_jitter boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    RETURN QUERY SELECT c.ev_type, c.max_retries, c.retry_delay, c.retry_factor, c.retry_cap, c.retry_jitter
                   FROM pglogq.type_config c WHERE c.queue_id = q.queue_id ORDER BY c.ev_type;
END $$;
