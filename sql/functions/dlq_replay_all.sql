-- pglogq.dlq_replay_all(queue_name, consumer_name, msg_type, older_than): replay many dead letters.
-- Parameters: queue_name; consumer_name  only this consumer's (NULL: every consumer's);
--             msg_type  only events of this type (NULL: any); older_than  only those
--             dead-lettered at least this long ago (NULL: any age)
-- Returns:    the number of dead letters replayed.  Each goes back to the consumer that
--             dead-lettered it only, as dlq_replay does (same msg_id, retry_count 0).
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than.
-- Tables:     dead_letter (delete), event (insert), queue (read).
-- One set-based statement.  Concurrent calls (and dlq_replay) replay each dead letter once.
CREATE OR REPLACE FUNCTION pglogq.dlq_replay_all(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL,
    older_than interval DEFAULT NULL)
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
    WITH d AS (
        DELETE FROM pglogq.dead_letter x
         WHERE x.queue_id = q.queue_id
           AND (sub IS NULL OR x.sub_id = sub)
           AND (msg_type IS NULL OR x.ev_type = msg_type)
           AND (cutoff IS NULL OR x.failed_at <= cutoff)
        RETURNING x.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers,
                              ev_priority, ev_retry, ev_owner)
    SELECT d.queue_id, q2.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers,
           d.ev_priority, 0, d.sub_id
      FROM d JOIN pglogq.queue q2 ON q2.queue_id = d.queue_id
     ORDER BY d.dead_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
