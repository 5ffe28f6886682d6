-- pglogq._retries(consumer_sub_id, after_id, only_id, only_type, max_rows, held_only, upto_id):
-- the events a consumer failed that come back to it later (the one owner of the state 'retry'
-- of lookup and jobs).
-- Parameters: consumer_sub_id  the consumer's subscription row (parent_id NULL);
--             after_id  only msg_ids above it (0: from the start); only_id  only this msg_id
--             (NULL: any); only_type  only events of this type (NULL: any); max_rows  at most
--             this many rows (NULL: all); held_only  only the events held in a stream (below):
--             the only ones that can lie after the acknowledged part of an open batch (a nack
--             takes an event of the page, at or before its end, and its ack passes it);
--             upto_id  only msg_ids up to it (NULL: no bound)
-- Returns:    rows (msg_id, ev_type, ev_time, first_failed_at, due_at, attempts, reason), by
--             msg_id: attempts  failed deliveries so far; due_at  when it comes back (in the
--             past: due, not handed out again yet); reason  the last nack's.
-- Raises:     nothing.
-- Tables:     retry, subscription, event, attempt (read).
-- A failed event waits in one of two places, and both are read here:
-- - the retry table (a queue of one partition, and the urgent lane): the nack moved a copy
--   there, which the ticker's pump puts back in the log at due_at;
-- - a stream of a partitioned queue held by a strict nack (see nack): the event stays in the
--   stream's open batch at (hold_txid, hold_id), the stream is not handed out before hold_until,
--   and its failed attempts and last reason are in the stream's attempt row.  The hold lasts
--   until the stream's page is handed out again (receive) or its batch is closed.
-- plpgsql, two statements: the look-up of one id by index equality, the page by an index range.
-- Custom plans with the consumer's queue id: the held event is read in the queue's own event
-- partitions (a plan over every queue's costs and locks in proportion to the queues).
CREATE OR REPLACE FUNCTION pglogq._retries(
    consumer_sub_id integer, after_id bigint DEFAULT 0, only_id bigint DEFAULT NULL, only_type text DEFAULT NULL,
    max_rows integer DEFAULT NULL, held_only boolean DEFAULT false, upto_id bigint DEFAULT NULL)
RETURNS TABLE (msg_id bigint, ev_type text, ev_time timestamptz, first_failed_at timestamptz,
               due_at timestamptz, attempts integer, reason text)
LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    qid integer := (SELECT x.queue_id FROM pglogq.subscriber x WHERE x.sub_id = _retries.consumer_sub_id);
BEGIN
    IF only_id IS NOT NULL THEN
        RETURN QUERY
        SELECT r.msg_id, r.ev_type, r.ev_time, r.first_failed_at, r.due_at, r.retry_count, r.reason
          FROM pglogq.retry r
         WHERE NOT _retries.held_only AND r.sub_id = _retries.consumer_sub_id AND r.msg_id = _retries.only_id
           AND (_retries.only_type IS NULL OR r.ev_type = _retries.only_type)
        UNION ALL
        SELECT s.hold_id, x.ev_type, x.ev_time, a.first_at, s.hold_until, x.ev_retry + coalesce(a.crashes, 0),
               a.reason
          FROM pglogq.subscription s
          JOIN pglogq.event x ON x.ev_queue = qid AND x.ev_txid = s.hold_txid AND x.ev_id = s.hold_id
          LEFT JOIN pglogq.attempt a ON a.sub_id = s.sub_id AND a.msg_id = s.hold_id
         WHERE s.parent_id = _retries.consumer_sub_id AND s.stream >= 0 AND s.hold_until IS NOT NULL
           AND s.hold_id = _retries.only_id
           AND (_retries.only_type IS NULL OR x.ev_type = _retries.only_type);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT u.* FROM (
        (SELECT r.msg_id, r.ev_type, r.ev_time, r.first_failed_at, r.due_at, r.retry_count, r.reason
           FROM pglogq.retry r
          WHERE NOT _retries.held_only AND r.sub_id = _retries.consumer_sub_id AND r.msg_id > _retries.after_id
            AND r.msg_id <= coalesce(_retries.upto_id, 9223372036854775807)
            AND (_retries.only_type IS NULL OR r.ev_type = _retries.only_type)
          ORDER BY r.msg_id LIMIT _retries.max_rows)
        UNION ALL
        SELECT s.hold_id, x.ev_type, x.ev_time, a.first_at, s.hold_until, x.ev_retry + coalesce(a.crashes, 0),
               a.reason
          FROM pglogq.subscription s
          JOIN pglogq.event x ON x.ev_queue = qid AND x.ev_txid = s.hold_txid AND x.ev_id = s.hold_id
          LEFT JOIN pglogq.attempt a ON a.sub_id = s.sub_id AND a.msg_id = s.hold_id
         WHERE s.parent_id = _retries.consumer_sub_id AND s.stream >= 0 AND s.hold_until IS NOT NULL
           AND s.hold_id > _retries.after_id AND s.hold_id <= coalesce(_retries.upto_id, 9223372036854775807)
           AND (_retries.only_type IS NULL OR x.ev_type = _retries.only_type)) u
     ORDER BY u.msg_id LIMIT _retries.max_rows;
END $$;
