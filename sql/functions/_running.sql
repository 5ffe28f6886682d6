-- pglogq._running(queue_id, msg_id): is a handler of some consumer on this event now?
-- Parameters: queue_id; msg_id
-- Returns:    true when the event is in the page of an open batch of a holder of the queue, at or
--             before its handler-start frontier (started, not acknowledged).
--             Only the holder's own stream counts (a partition's, the urgent lane's, or the
--             rest): a page's range of keys holds the events of the other streams too.
-- Raises:     nothing.
-- Tables:     subscription, tick, event, queue (read).
-- Plans: PL/pgSQL with custom plans (plan_cache_mode): a SQL-language function's query is planned
-- without its parameters' values (before PostgreSQL 18), so it read and locked every queue's
-- tick and event partitions on every call (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq._running(queue_id integer, msg_id bigint)
RETURNS boolean LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM pglogq.subscription h
          JOIN pglogq.tick tp ON tp.queue_id = h.queue_id AND tp.tick_id = h.batch_prev_tick
          JOIN pglogq.tick tc ON tc.queue_id = h.queue_id AND tc.tick_id = h.batch_cur_tick
          JOIN pglogq.event x ON x.ev_queue = h.queue_id AND x.ev_id = _running.msg_id
               AND x.ev_txid >= pg_snapshot_xmin(tp.tick_snapshot) AND x.ev_txid < pg_snapshot_xmax(tc.tick_snapshot)
         WHERE h.queue_id = _running.queue_id AND h.batch_id IS NOT NULL AND h.page_end_txid IS NOT NULL
           AND pg_visible_in_snapshot(x.ev_txid, tc.tick_snapshot)
           AND NOT pg_visible_in_snapshot(x.ev_txid, tp.tick_snapshot)
           AND (x.ev_owner IS NULL OR x.ev_owner = coalesce(h.parent_id, h.sub_id))
           -- the holder's stream only: a partition's, the urgent lane's, or the rest (as nack)
           AND CASE WHEN coalesce(h.stream, h.lease_stream) IS NULL
                    THEN x.ev_priority <= 100
                         OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id)
                    WHEN coalesce(h.stream, h.lease_stream) = -1 THEN x.ev_priority > 100
                    WHEN coalesce(h.stream, h.lease_stream) <= -2 THEN x.ev_id % 8 = -2 - coalesce(h.stream, h.lease_stream)
                                             AND (x.ev_priority <= 100
                                                  OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id))
                    ELSE x.ev_partition = coalesce(h.stream, h.lease_stream) END
           AND pglogq._page_position(h, x.ev_priority, x.ev_txid, x.ev_id, true) = 0);
END $$;
