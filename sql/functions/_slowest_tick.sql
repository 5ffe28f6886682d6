-- pglogq._slowest_tick(queue_id): the oldest tick any consumer, stream (of a partition or of the
-- urgent lane) or open batch still reads from.
-- Parameters: queue_id
-- Returns:    tick id, or NULL when the queue has no consumers.
-- Tables:     subscription, stream_mark (read).
-- A partition's stream without a mark (pglogq.stream_mark, see _stream_skip) counts only through its
-- consumer's cursor: it has nothing to read up to the consumer's due_tick, and its own cursor is
-- left where it last read (moved only when it comes back into the set), so it may name a tick
-- long gone.
CREATE OR REPLACE FUNCTION pglogq._slowest_tick(queue_id integer)
RETURNS bigint LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT min(least(s.last_tick, s.batch_prev_tick))
      FROM pglogq.subscription s
     WHERE s.queue_id = _slowest_tick.queue_id
       AND (s.parent_id IS NULL OR s.stream < 0 OR s.batch_prev_tick IS NOT NULL
            OR (s.stream >= 0 AND EXISTS (SELECT 1 FROM pglogq.stream_mark m
                                           WHERE m.consumer_id = s.parent_id AND m.stream = s.stream)));
$$;
