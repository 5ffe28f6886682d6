-- pglogq.dlq_inspect(queue_name, consumer_name, msg_type, older_than, max_rows): list dead letters.
-- Parameters: queue_name; consumer_name  only this consumer's dead letters (NULL: all consumers);
--             msg_type  only events of this type (NULL: any); older_than  only those
--             dead-lettered at least this long ago (NULL: any age); max_rows  1..100000 (default 100)
-- Returns:    rows (dead_id, queue, consumer, msg_id, type, payload, headers, retry_count,
--             reason, created_at, first_failed_at, failed_at), oldest dead letter first.
--             retry_count is the number of redeliveries the event had; reason the reason given
--             by the last nack; created_at the time it was sent; first_failed_at its first nack.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 max_rows or older_than out of range.
-- Tables:     dead_letter, subscription, queue (read).
-- The filters (queue, consumer, type, older_than) come in the same order in every dlq_ function
-- and mean the same (pglogq._dead_letter_filter checks them, pglogq._dead_letters selects);
-- max_rows used to come third (docs/changelog.md).
CREATE OR REPLACE FUNCTION pglogq.dlq_inspect(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL,
    older_than interval DEFAULT NULL, max_rows integer DEFAULT 100)
RETURNS TABLE (dead_id bigint, queue text, consumer text, msg_id bigint, type text, payload jsonb,
               headers jsonb, retry_count integer, reason text, created_at timestamptz,
               first_failed_at timestamptz, failed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    f record;
BEGIN
    IF max_rows IS NULL OR max_rows > 100000 THEN
        RAISE EXCEPTION 'invalid max_rows %: use 1..100000', coalesce(max_rows::text, 'NULL')
            USING ERRCODE = 'PQ019';
    END IF;
    f := pglogq._dead_letter_filter(queue_name, consumer_name, older_than, max_rows);
    RETURN QUERY
    SELECT d.dead_id, q.queue_name, s.consumer_name, d.msg_id, d.ev_type, d.ev_payload, d.ev_headers,
           d.retry_count, d.reason, d.ev_time, d.first_failed_at, d.failed_at
      FROM pglogq._dead_letters(f.queue_id, f.sub_id, msg_type, f.cutoff, max_rows) l(id)
      -- a probe of the primary key per row whatever the statistics (as in dlq_search)
      CROSS JOIN LATERAL (SELECT x.* FROM pglogq.dead_letter x WHERE x.dead_id = l.id LIMIT 1) d
      JOIN pglogq.subscription s ON s.sub_id = d.sub_id
      JOIN pglogq.queue q ON q.queue_id = d.queue_id
     ORDER BY d.dead_id;
END $$;
