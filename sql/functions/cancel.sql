-- pglogq.cancel(queue_name, msg_id): withdraw an event that no consumer has received yet.
-- Parameters: queue_name; msg_id  an id returned by send/send_batch on that queue
-- Returns:    true when the event will never be delivered: a delayed event not yet due (its row
--             is deleted), or an event in the log that no consumer has been handed yet (it is
--             recorded in pglogq.cancelled and receive skips it).  false when some consumer has
--             already been handed it (or it was retried, dead-lettered or cancelled before),
--             or when nothing with that id is stored any more (rolled back, or delivered and
--             rotated away), or when it was sent by a transaction that has not committed.
-- Raises:     PQ001 unknown queue; PQ021 msg_id was never issued by this queue.
-- Tables:     delayed (delete), event (read), subscription (FOR SHARE on the queue's rows),
--             tick (read), retry, dead_letter (read), cancelled (insert).
-- "Handed" means returned by receive in a page: events of an open batch after the page receive
-- returned last are not handed yet.  The queue's subscription rows are locked FOR SHARE (workers
-- first, then consumers, the order receive takes them in), so a concurrent receive either runs
-- before the check and is seen by it, or runs after the cancellation and skips the event.
CREATE OR REPLACE FUNCTION pglogq.cancel(queue_name text, msg_id bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    e pglogq.event;
    handed boolean;
    slow bigint;
    lo xid8 := '0'::xid8;
BEGIN
    q := pglogq._queue(queue_name);
    IF msg_id IS NULL OR msg_id < 1 OR msg_id > coalesce(pg_sequence_last_value(q.event_seq), 0) THEN
        RAISE EXCEPTION 'unknown message % on queue "%"', coalesce(msg_id::text, 'NULL'), q.queue_name
            USING ERRCODE = 'PQ021', HINT = 'this queue has never issued that id';
    END IF;
    -- a delayed event: still in the waiting room (the pump deletes it when it moves it)
    DELETE FROM pglogq.delayed d WHERE d.queue_id = q.queue_id AND d.msg_id = cancel.msg_id;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- serialise with receive: it locks the holder row (a worker, then its consumer)
    PERFORM 1 FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NOT NULL
     ORDER BY s.sub_id FOR SHARE;
    PERFORM 1 FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL
     ORDER BY s.sub_id FOR SHARE;
    -- retried, replayed or dead-lettered: it has been delivered
    IF EXISTS (SELECT 1 FROM pglogq.subscription s JOIN pglogq.retry r ON r.sub_id = s.sub_id
                WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL AND r.msg_id = cancel.msg_id)
       OR EXISTS (SELECT 1 FROM pglogq.subscription s JOIN pglogq.dead_letter d ON d.sub_id = s.sub_id
                   WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL AND d.msg_id = cancel.msg_id)
       OR EXISTS (SELECT 1 FROM pglogq.cancelled c WHERE c.queue_id = q.queue_id AND c.msg_id = cancel.msg_id) THEN
        RETURN false;
    END IF;
    -- events below the slowest position's xmin were handed to every consumer: look above it only
    slow := pglogq._slowest_tick(q.queue_id);
    IF slow IS NOT NULL THEN
        SELECT pg_snapshot_xmin(t.tick_snapshot) INTO lo FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_id = slow;
    END IF;
    IF EXISTS (SELECT 1 FROM pglogq.event x
                WHERE x.ev_queue = q.queue_id AND x.ev_id = cancel.msg_id AND x.ev_owner IS NOT NULL
                  AND x.ev_txid >= lo) THEN
        RETURN false;
    END IF;
    SELECT * INTO e FROM pglogq.event x
     WHERE x.ev_queue = q.queue_id AND x.ev_id = cancel.msg_id AND x.ev_owner IS NULL
       AND x.ev_txid >= lo
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- handed to some consumer: its cursor tick sees the event, and the event is not in the
    -- not-yet-returned part of an open batch of the consumer or one of its workers
    SELECT EXISTS (
        SELECT 1 FROM pglogq.subscription c
          JOIN pglogq.tick t ON t.queue_id = c.queue_id AND t.tick_id = c.last_tick
         WHERE c.queue_id = q.queue_id AND c.parent_id IS NULL
           AND pg_visible_in_snapshot(e.ev_txid, t.tick_snapshot)
           AND NOT EXISTS (
               SELECT 1 FROM pglogq.subscription h
                 JOIN pglogq.tick tp ON tp.queue_id = h.queue_id AND tp.tick_id = h.batch_prev_tick
                 JOIN pglogq.tick tc ON tc.queue_id = h.queue_id AND tc.tick_id = h.batch_cur_tick
                WHERE (h.sub_id = c.sub_id OR h.parent_id = c.sub_id) AND h.batch_id IS NOT NULL
                  AND pg_visible_in_snapshot(e.ev_txid, tc.tick_snapshot)
                  AND NOT pg_visible_in_snapshot(e.ev_txid, tp.tick_snapshot)
                  AND (coalesce(h.page_end_txid, h.page_txid) IS NULL
                       OR CASE WHEN h.batch_big
                               THEN (e.ev_txid, e.ev_id)
                                    > (coalesce(h.page_end_txid, h.page_txid),
                                       CASE WHEN h.page_end_txid IS NULL THEN h.page_id ELSE h.page_end_id END)
                               ELSE (-e.ev_priority::integer, e.ev_txid, e.ev_id)
                                    > (-(CASE WHEN h.page_end_txid IS NULL THEN h.page_prio ELSE h.page_end_prio END),
                                       coalesce(h.page_end_txid, h.page_txid),
                                       CASE WHEN h.page_end_txid IS NULL THEN h.page_id ELSE h.page_end_id END)
                          END)))
      INTO handed;
    IF handed THEN
        RETURN false;
    END IF;
    INSERT INTO pglogq.cancelled (queue_id, msg_id, ev_txid) VALUES (q.queue_id, e.ev_id, e.ev_txid)
    ON CONFLICT DO NOTHING;
    RETURN true;
END $$;
