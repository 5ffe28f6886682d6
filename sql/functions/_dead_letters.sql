-- pglogq._dead_letters(queue_name, consumer_name, msg_type, older_than, max_rows): the dead
-- letters a filter selects (the one owner of the dead-letter filters).
-- Parameters: queue_name; consumer_name  only this consumer's (NULL: every consumer's);
--             msg_type  only events of this type (NULL: any); older_than  only those
--             dead-lettered at least this long ago (NULL: any age); max_rows  at most this many,
--             oldest first (NULL: all)
-- Returns:    setof dead_id, oldest first.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than, or
--             max_rows below 1.
-- Tables:     dead_letter (read).
-- dlq_inspect, dlq_count, dlq_replay_all and dlq_purge take these filters in this order and
-- select through this function, so the four always agree on what a filter matches.
CREATE OR REPLACE FUNCTION pglogq._dead_letters(
    queue_name text, consumer_name text, msg_type text, older_than interval, max_rows bigint)
RETURNS SETOF bigint LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    sub integer;
    cutoff timestamptz;
BEGIN
    q := pglogq._queue(queue_name);
    IF consumer_name IS NOT NULL THEN
        sub := (pglogq._consumer(q.queue_id, q.queue_name, consumer_name)).sub_id;
    END IF;
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'invalid older_than %: must not be negative', older_than USING ERRCODE = 'PQ019';
    END IF;
    IF max_rows < 1 THEN
        RAISE EXCEPTION 'invalid max_rows %: must be at least 1', max_rows USING ERRCODE = 'PQ019';
    END IF;
    cutoff := clock_timestamp() - older_than;
    RETURN QUERY
    SELECT d.dead_id FROM pglogq.dead_letter d
     WHERE d.queue_id = q.queue_id
       AND (sub IS NULL OR d.sub_id = sub)
       AND (msg_type IS NULL OR d.ev_type = msg_type)
       AND (cutoff IS NULL OR d.failed_at <= cutoff)
     ORDER BY d.dead_id
     LIMIT max_rows;
END $$;
