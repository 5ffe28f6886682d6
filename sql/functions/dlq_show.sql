-- pglogq.dlq_show(for_dead_id): one dead letter in full.
-- Parameters: for_dead_id  a dead_id from dlq_inspect
-- Returns:    one row with the columns of dlq_inspect (dead_id, queue, consumer, msg_id, type,
--             payload, headers, retry_count, reason, created_at, first_failed_at, failed_at).
-- Raises:     PQ012 unknown dead letter (never existed, purged, or already replayed).
-- Tables:     dead_letter, subscription, queue (read).
CREATE OR REPLACE FUNCTION pglogq.dlq_show(for_dead_id bigint)
RETURNS TABLE (dead_id bigint, queue text, consumer text, msg_id bigint, type text, payload jsonb,
               headers jsonb, retry_count integer, reason text, created_at timestamptz,
               first_failed_at timestamptz, failed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    wanted bigint := for_dead_id;
BEGIN
    RETURN QUERY
    SELECT d.dead_id, q.queue_name, s.consumer_name, d.msg_id, d.ev_type, d.ev_payload, d.ev_headers,
           d.retry_count, d.reason, d.ev_time, d.first_failed_at, d.failed_at
      FROM pglogq.dead_letter d
      JOIN pglogq.subscription s ON s.sub_id = d.sub_id
      JOIN pglogq.queue q ON q.queue_id = d.queue_id
     WHERE d.dead_id = wanted;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown dead letter %', coalesce(wanted::text, 'NULL')
            USING ERRCODE = 'PQ012', HINT = 'it may have been replayed or purged already';
    END IF;
END $$;
