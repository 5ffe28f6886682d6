-- pglogq.dlq_purge(queue_name, older_than, consumer_name, msg_type): delete dead letters for good.
-- Parameters: queue_name; older_than  only those dead-lettered at least this long ago (NULL: all);
--             consumer_name  only this consumer's (NULL: every consumer's);
--             msg_type  only events of this type (NULL: any)
-- Returns:    the number of dead letters deleted.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than.
-- Tables:     dead_letter (delete).
CREATE OR REPLACE FUNCTION pglogq.dlq_purge(
    queue_name text, older_than interval DEFAULT NULL, consumer_name text DEFAULT NULL,
    msg_type text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    sub integer;
    cutoff timestamptz;
    n integer;
BEGIN
    q := pglogq._queue(queue_name);
    IF consumer_name IS NOT NULL THEN
        sub := (pglogq._consumer(q.queue_id, q.queue_name, consumer_name)).sub_id;
    END IF;
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'invalid older_than %: must not be negative', older_than USING ERRCODE = 'PQ019';
    END IF;
    cutoff := clock_timestamp() - older_than;
    DELETE FROM pglogq.dead_letter x
     WHERE x.queue_id = q.queue_id
       AND (sub IS NULL OR x.sub_id = sub)
       AND (msg_type IS NULL OR x.ev_type = msg_type)
       AND (cutoff IS NULL OR x.failed_at <= cutoff);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
