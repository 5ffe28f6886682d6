-- pglogq.maint_pump(): move every due retry and delayed event into its queue's current table.
-- Parameters: none.
-- Returns:    the number of events moved.
-- Tables:     queue (FOR KEY SHARE of the queues with due rows), retry, delayed (delete of due
--             rows), event (insert).
-- Set-based: all due rows in one statement each.  Concurrent pumps move each row once (the
-- DELETE ... RETURNING locks it).  A retried event keeps its msg_id and goes to its consumer only.
CREATE OR REPLACE FUNCTION pglogq.maint_pump()
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n1 integer;
    n2 integer;
    qids integer[];
    now_ts timestamptz := clock_timestamp();  -- a plain value: the due_at/deliver_at indexes apply
BEGIN
    -- the queues with due rows, locked FOR KEY SHARE first (the order drop_queue takes: queue
    -- row, then its rows): a drop in progress is waited for, and its queue is then left out,
    -- instead of an insert into an event table that is being dropped
    qids := ARRAY(SELECT q.queue_id FROM pglogq.queue q
                   WHERE q.queue_id IN (SELECT r.queue_id FROM pglogq.retry r WHERE r.due_at <= now_ts
                                        UNION SELECT d.queue_id FROM pglogq.delayed d WHERE d.deliver_at <= now_ts)
                   ORDER BY q.queue_id FOR KEY SHARE);
    IF cardinality(qids) = 0 THEN
        RETURN 0;
    END IF;
    WITH due AS (
        DELETE FROM pglogq.retry r WHERE r.due_at <= now_ts AND r.queue_id = ANY (qids) RETURNING r.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers,
                              ev_priority, ev_retry, ev_owner, ev_failed_at, ev_key, ev_partition)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers,
           d.ev_priority, d.retry_count, d.sub_id, d.first_failed_at, d.ev_key,
           pglogq._event_partition(q.partitions, d.ev_key, d.msg_id)
      FROM due d JOIN pglogq.queue q ON q.queue_id = d.queue_id;
    GET DIAGNOSTICS n1 = ROW_COUNT;
    WITH due AS (
        DELETE FROM pglogq.delayed r WHERE r.deliver_at <= now_ts AND r.queue_id = ANY (qids) RETURNING r.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers, ev_priority,
                              ev_key, ev_partition)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers, d.ev_priority,
           d.ev_key, pglogq._event_partition(q.partitions, d.ev_key, d.msg_id)
      FROM due d JOIN pglogq.queue q ON q.queue_id = d.queue_id;
    GET DIAGNOSTICS n2 = ROW_COUNT;
    RETURN n1 + n2;
END $$;
