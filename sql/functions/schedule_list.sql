-- pglogq.schedule_list(queue_name): the schedules of a queue (NULL: of every queue).
-- Parameters: queue_name  or NULL
-- Returns:    rows (queue, name, cron, type, payload, headers, priority, missed, created_at,
--             next_due, last_due, last_msg_id, sent, skipped), by queue and name.  next_due NULL:
--             not planned yet (no ticker has seen the schedule, or the ticker refuses its
--             expression and says so in its log); sent / skipped: due times sent, and skipped
--             under the 'skip' policy.
-- Raises:     PQ001 unknown queue.
-- Tables:     schedule, queue (read).
CREATE OR REPLACE FUNCTION pglogq.schedule_list(queue_name text DEFAULT NULL)
RETURNS TABLE (queue text, name text, cron text, type text, payload jsonb, headers jsonb, priority integer,
               missed text, created_at timestamptz, next_due timestamptz, last_due timestamptz,
               last_msg_id bigint, sent bigint, skipped bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
BEGIN
    IF queue_name IS NOT NULL THEN
        qid := (pglogq._queue(queue_name)).queue_id;
    END IF;
    RETURN QUERY
    SELECT x.queue_name, s.name, s.cron, s.ev_type, s.ev_payload, s.ev_headers, s.ev_priority::integer, s.missed,
           s.created_at, s.next_due, s.last_due, s.last_msg_id, s.sent, s.skipped
      FROM pglogq.schedule s JOIN pglogq.queue x ON x.queue_id = s.queue_id
     WHERE qid IS NULL OR s.queue_id = qid
     ORDER BY x.queue_name, s.name;
END $$;
