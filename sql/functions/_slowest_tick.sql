-- pglogq._slowest_tick(queue_id): the oldest tick any consumer, stream (of a partition or of the
-- urgent lane) or open batch still reads from.
-- Parameters: queue_id
-- Returns:    tick id, or NULL when the queue has no consumers.
-- Tables:     subscription (read).
CREATE OR REPLACE FUNCTION pglogq._slowest_tick(queue_id integer)
RETURNS bigint LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT min(least(s.last_tick, s.batch_prev_tick))
      FROM pglogq.subscription s
     WHERE s.queue_id = _slowest_tick.queue_id
       AND (s.parent_id IS NULL OR s.stream IS NOT NULL OR s.batch_prev_tick IS NOT NULL);
$$;
