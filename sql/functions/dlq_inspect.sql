-- pglogq.dlq_inspect(queue_name, consumer_name, max_rows, msg_type, older_than): list dead letters.
-- Parameters: queue_name; consumer_name  only this consumer's dead letters (NULL: all consumers);
--             max_rows  1..100000 (default 100); msg_type  only events of this type (NULL: any);
--             older_than  only those dead-lettered at least this long ago (NULL: any age)
-- Returns:    rows (dead_id, queue, consumer, msg_id, type, payload, headers, retry_count,
--             reason, created_at, first_failed_at, failed_at), oldest dead letter first.
--             retry_count is the number of redeliveries the event had; reason the reason given
--             by the last nack; created_at the time it was sent; first_failed_at its first nack.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 max_rows or older_than out of range.
-- Tables:     dead_letter, subscription, queue (read).
CREATE OR REPLACE FUNCTION pglogq.dlq_inspect(
    queue_name text, consumer_name text DEFAULT NULL, max_rows integer DEFAULT 100,
    msg_type text DEFAULT NULL, older_than interval DEFAULT NULL)
RETURNS TABLE (dead_id bigint, queue text, consumer text, msg_id bigint, type text, payload jsonb,
               headers jsonb, retry_count integer, reason text, created_at timestamptz,
               first_failed_at timestamptz, failed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    sub integer;
BEGIN
    q := pglogq._queue(queue_name);
    IF consumer_name IS NOT NULL THEN
        sub := (pglogq._consumer(q.queue_id, q.queue_name, consumer_name)).sub_id;
    END IF;
    IF max_rows IS NULL OR max_rows < 1 OR max_rows > 100000 THEN
        RAISE EXCEPTION 'invalid max_rows %: use 1..100000', coalesce(max_rows::text, 'NULL')
            USING ERRCODE = 'PQ019';
    END IF;
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'invalid older_than %: must not be negative', older_than USING ERRCODE = 'PQ019';
    END IF;
    RETURN QUERY
    SELECT d.dead_id, q.queue_name, s.consumer_name, d.msg_id, d.ev_type, d.ev_payload, d.ev_headers,
           d.retry_count, d.reason, d.ev_time, d.first_failed_at, d.failed_at
      FROM pglogq.dead_letter d JOIN pglogq.subscription s ON s.sub_id = d.sub_id
     WHERE d.queue_id = q.queue_id
       AND (sub IS NULL OR d.sub_id = sub)
       AND (msg_type IS NULL OR d.ev_type = msg_type)
       AND (older_than IS NULL OR d.failed_at <= clock_timestamp() - older_than)
     ORDER BY d.dead_id
     LIMIT max_rows;
END $$;
