-- pglogq.maint_pump(): move due retries and delayed events into their queues' current tables,
-- at most 10,000 of each per call.
-- Parameters: none.
-- Returns:    the number of events moved (at most 20,000: 10,000 retries and 10,000 delayed
--             events); the rest stays due and is moved by the next calls (maint_operations
--             names pump again while anything is due).
-- Tables:     queue (FOR KEY SHARE of the queues with due rows; an id of each one's sequence),
--             retry, delayed (delete of due rows), event (insert).
-- Bounded: each call reads and moves at most 10,000 due rows of each table, the earliest due
-- first (due_at, deliver_at: through their indexes), so a burst of 100,000 due retries is ten
-- short transactions, not one long statement that holds every row and writes one huge batch.
-- The events of one call share a transaction, so they come in one batch, in priority order;
-- what a call leaves comes in a later batch, like a row that fell due after it.  Concurrent
-- pumps move each row once: a pump locks the rows it takes and skips those another pump (or a
-- transaction changing them) holds, which stay for the next call.  A retried event keeps its
-- msg_id and goes to its consumer only.  Into each queue it moves events the way a send does:
-- holding the queue's shared advisory lock (tried: a queue being dropped waits for the next
-- call) and drawing an id of the queue's sequence first, so that the ticker's pass sees the
-- queue has something to do (pglogq.ticker) although the events keep their older ids.
CREATE OR REPLACE FUNCTION pglogq.maint_pump()
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n1 integer;
    n2 integer;
    qids integer[];
    qn text;
    sq regclass;
    qi integer;
    now_ts timestamptz := clock_timestamp();  -- a plain value: the due_at/deliver_at indexes apply
    cap constant integer := 10000;  -- rows of each table per call (documented in the header)
BEGIN
    -- the queues of the rows this call will take, locked FOR KEY SHARE first (the order
    -- drop_queue takes: queue row, then its rows): a drop in progress is waited for, and its
    -- queue is then left out, instead of an insert into an event table that is being dropped
    qids := ARRAY(SELECT q.queue_id FROM pglogq.queue q
                   WHERE q.queue_id IN (SELECT r.queue_id
                                          FROM (SELECT r.queue_id FROM pglogq.retry r WHERE r.due_at <= now_ts
                                                 ORDER BY r.due_at LIMIT cap) r
                                        UNION
                                        SELECT d.queue_id
                                          FROM (SELECT d.queue_id FROM pglogq.delayed d WHERE d.deliver_at <= now_ts
                                                 ORDER BY d.deliver_at LIMIT cap) d)
                   ORDER BY q.queue_id FOR KEY SHARE);
    -- the lock before the id, one queue at a time (see the header)
    FOR qn, sq, qi IN SELECT q.queue_name, q.event_seq, q.queue_id FROM pglogq.queue q
                       WHERE q.queue_id = ANY (qids) ORDER BY q.queue_id LOOP
        IF pg_try_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(qn)) THEN
            PERFORM nextval(sq);
        ELSE
            qids := array_remove(qids, qi);
        END IF;
    END LOOP;
    IF cardinality(qids) = 0 THEN
        RETURN 0;
    END IF;
    -- a sleeping ticker is woken at commit, as by a send (pglogq._wake_ticker)
    PERFORM pglogq._wake_ticker();
    WITH pick AS (
        SELECT r.sub_id, r.msg_id FROM pglogq.retry r
         WHERE r.due_at <= now_ts AND r.queue_id = ANY (qids)
         ORDER BY r.due_at LIMIT cap
         FOR UPDATE SKIP LOCKED
    ), due AS (
        DELETE FROM pglogq.retry r USING pick p
         WHERE r.sub_id = p.sub_id AND r.msg_id = p.msg_id
        RETURNING r.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers,
                              ev_priority, ev_retry, ev_owner, ev_failed_at, ev_key, ev_partition)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers,
           d.ev_priority, d.retry_count, d.sub_id, d.first_failed_at, d.ev_key,
           pglogq._event_partition(q.partitions, d.ev_key, d.msg_id)
      FROM due d JOIN pglogq.queue q ON q.queue_id = d.queue_id;
    GET DIAGNOSTICS n1 = ROW_COUNT;
    WITH pick AS (
        SELECT d.queue_id, d.msg_id FROM pglogq.delayed d
         WHERE d.deliver_at <= now_ts AND d.queue_id = ANY (qids)
         ORDER BY d.deliver_at LIMIT cap
         FOR UPDATE SKIP LOCKED
    ), due AS (
        DELETE FROM pglogq.delayed r USING pick p
         WHERE r.queue_id = p.queue_id AND r.msg_id = p.msg_id
        RETURNING r.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers, ev_priority,
                              ev_key, ev_partition)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers, d.ev_priority,
           d.ev_key, pglogq._event_partition(q.partitions, d.ev_key, d.msg_id)
      FROM due d JOIN pglogq.queue q ON q.queue_id = d.queue_id;
    GET DIAGNOSTICS n2 = ROW_COUNT;
    RETURN n1 + n2;
END $$;
