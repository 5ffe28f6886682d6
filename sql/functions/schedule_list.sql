-- pglogq.schedule_list(queue_name, max_rows): the schedules of a queue (NULL: of every queue).
-- Parameters: queue_name  or NULL; max_rows  at most this many, the soonest next_due first
--             (those not planned yet last), 1..100000 (NULL: all, by queue and name)
-- Returns:    rows (queue, name, cron, type, payload, headers, priority, missed, created_at,
--             next_due, last_due, last_msg_id, sent, skipped), by queue and name (with
--             max_rows: by next_due).  next_due NULL:
--             not planned yet (no ticker has seen the schedule, or the ticker refuses its
--             expression and says so in its log); sent / skipped: due times sent, and skipped
--             under the 'skip' policy.
-- Raises:     PQ001 unknown queue; PQ019 max_rows out of range.
-- Tables:     schedule, queue (read).
-- With max_rows the rows come from an index in their order, cut by the LIMIT: a screen that
-- shows the next few schedules reads those, not every schedule (schedule_queue_due_idx for one
-- queue, schedule_due_idx for all: two statements, so that each plan has its index; one
-- statement with "qid IS NULL OR" read and sorted every schedule of the queue).
CREATE OR REPLACE FUNCTION pglogq.schedule_list(queue_name text DEFAULT NULL, max_rows integer DEFAULT NULL)
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
    IF max_rows < 1 OR max_rows > 100000 THEN
        RAISE EXCEPTION 'invalid max_rows %: use 1..100000 (NULL: all)', max_rows USING ERRCODE = 'PQ019';
    END IF;
    IF max_rows IS NOT NULL AND qid IS NOT NULL THEN
        RETURN QUERY
        SELECT schedule_list.queue_name, s.name, s.cron, s.ev_type, s.ev_payload, s.ev_headers, s.ev_priority::integer,
               s.missed, s.created_at, s.next_due, s.last_due, s.last_msg_id, s.sent, s.skipped
          FROM pglogq.schedule s
         WHERE s.queue_id = qid
         ORDER BY s.queue_id, s.next_due, s.schedule_id
         LIMIT max_rows;
        RETURN;
    ELSIF max_rows IS NOT NULL THEN
        RETURN QUERY
        SELECT x.queue_name, s.name, s.cron, s.ev_type, s.ev_payload, s.ev_headers, s.ev_priority::integer,
               s.missed, s.created_at, s.next_due, s.last_due, s.last_msg_id, s.sent, s.skipped
          FROM pglogq.schedule s JOIN pglogq.queue x ON x.queue_id = s.queue_id
         ORDER BY s.next_due, s.schedule_id
         LIMIT max_rows;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT x.queue_name, s.name, s.cron, s.ev_type, s.ev_payload, s.ev_headers, s.ev_priority::integer, s.missed,
           s.created_at, s.next_due, s.last_due, s.last_msg_id, s.sent, s.skipped
      FROM pglogq.schedule s JOIN pglogq.queue x ON x.queue_id = s.queue_id
     WHERE qid IS NULL OR s.queue_id = qid
     ORDER BY x.queue_name, s.name;
END $$;
