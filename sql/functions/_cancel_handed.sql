-- pglogq._cancel_handed(queue_id, ev_txid, ev_id, ev_priority, ev_partition): has some consumer
-- of the queue been handed this event?
-- Parameters: queue_id; ev_txid, ev_id, ev_priority, ev_partition  the event row (its original,
--             ev_owner NULL)
-- Returns:    true when the event was handed to a consumer that still exists.
-- Raises:     nothing.
-- Tables:     subscription, tick, handed_run, attempt (read).
-- Handed means that a handler has started on it: in the part of a page up to the holder's
-- handler-start frontier (started_*: the whole page for a receiver that does not mark starts,
-- the events it marked with mark_started for one that does), or acknowledged, or started
-- before a crash (an attempt row).  A consumer hands itself what its cursor moves through by receiving: the events
-- visible in its cursor tick and not visible where its current run started (handed_from: set by
-- subscribe, seek and retention), minus the part of an open batch after the page receive
-- returned last, or after the start frontier; plus the runs that ended at an earlier jump (handed_run).  A cursor that
-- jumps past an event (subscribe after it, seek forward, retention) does not hand it.  When a
-- seek or retention drops an open batch, the whole dropped batch counts as handed.  On a
-- partitioned queue the consumer's cursor stays at or before its slowest stream's, so the
-- rules above hold for it as they are; the stream of the event's partition, which may be ahead,
-- hands what its own cursor moved through the same way (minus the part of its open batch after
-- its start frontier).  On a queue with an urgent lane, an urgent event is handed by the lane's
-- stream only, the same way.
-- Plans: the queue's own copy (_queue_functions) answers when it exists: it reads the queue's
-- own tick table, so its plans are generic and cached (planned once per session), and lock that
-- queue's tables only.  Without a copy (the queue has not received since an install changed the
-- functions) this body answers with a custom plan whose every tick read names the queue by the
-- argument: it reads and locks the queue's own tick partitions only too, but is planned on every
-- call (~3 ms of planning for ~0.3 ms of execution: a mass cancel paid it twice per event, in
-- cancel and in the re-check at COMMIT).
CREATE OR REPLACE FUNCTION pglogq._cancel_handed(
    queue_id integer, ev_txid xid8, ev_id bigint, ev_priority integer, ev_partition smallint DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    handed boolean;
BEGIN
    -- queue copy: from here
    IF to_regproc(format('pglogq.%I', '_q' || _cancel_handed.queue_id || '_@copies@__cancel_handed')) IS NOT NULL THEN
        EXECUTE format('SELECT pglogq.%I($1, $2, $3, $4, $5)', '_q' || _cancel_handed.queue_id || '_@copies@__cancel_handed')
           INTO handed USING queue_id, ev_txid, ev_id, ev_priority, ev_partition;
        RETURN handed;
    END IF;
    -- queue copy: to here
    RETURN EXISTS (
        SELECT 1 FROM pglogq.subscription c
          JOIN pglogq.tick t ON t.queue_id = _cancel_handed.queue_id AND t.tick_id = c.last_tick
         WHERE c.queue_id = _cancel_handed.queue_id AND c.parent_id IS NULL
           AND NOT (_cancel_handed.ev_priority > 100
                    AND (SELECT x.urgent_lane FROM pglogq.queue x WHERE x.queue_id = _cancel_handed.queue_id))
           AND pg_visible_in_snapshot(_cancel_handed.ev_txid, t.tick_snapshot)
           AND (c.handed_from IS NULL OR NOT pg_visible_in_snapshot(_cancel_handed.ev_txid, c.handed_from))
           AND NOT EXISTS (
               SELECT 1 FROM pglogq.subscription h
                 JOIN pglogq.tick tp ON tp.queue_id = _cancel_handed.queue_id AND tp.tick_id = h.batch_prev_tick
                 JOIN pglogq.tick tc ON tc.queue_id = _cancel_handed.queue_id AND tc.tick_id = h.batch_cur_tick
                WHERE (h.sub_id = c.sub_id OR h.parent_id = c.sub_id) AND h.batch_id IS NOT NULL
                  AND pg_visible_in_snapshot(_cancel_handed.ev_txid, tc.tick_snapshot)
                  AND NOT pg_visible_in_snapshot(_cancel_handed.ev_txid, tp.tick_snapshot)
                  AND pglogq._page_position(h, _cancel_handed.ev_priority, _cancel_handed.ev_txid,
                                            _cancel_handed.ev_id, true) = 1))
        OR EXISTS (
        SELECT 1 FROM pglogq.subscription st
          JOIN pglogq.subscription c ON c.sub_id = st.parent_id
          JOIN pglogq.tick t ON t.queue_id = _cancel_handed.queue_id AND t.tick_id = st.last_tick
         WHERE st.queue_id = _cancel_handed.queue_id
           AND st.stream = CASE WHEN _cancel_handed.ev_priority > 100
                                     AND (SELECT x.urgent_lane FROM pglogq.queue x
                                           WHERE x.queue_id = _cancel_handed.queue_id)
                                THEN -1 ELSE coalesce(_cancel_handed.ev_partition,
                                                      -2 - _cancel_handed.ev_id % 8) END
           AND pg_visible_in_snapshot(_cancel_handed.ev_txid, t.tick_snapshot)
           AND (c.handed_from IS NULL OR NOT pg_visible_in_snapshot(_cancel_handed.ev_txid, c.handed_from))
           AND NOT EXISTS (
               SELECT 1 FROM pglogq.tick tp, pglogq.tick tc
                WHERE st.batch_id IS NOT NULL
                  AND tp.queue_id = _cancel_handed.queue_id AND tp.tick_id = st.batch_prev_tick
                  AND tc.queue_id = _cancel_handed.queue_id AND tc.tick_id = st.batch_cur_tick
                  AND pg_visible_in_snapshot(_cancel_handed.ev_txid, tc.tick_snapshot)
                  AND NOT pg_visible_in_snapshot(_cancel_handed.ev_txid, tp.tick_snapshot)
                  AND pglogq._page_position(st, _cancel_handed.ev_priority, _cancel_handed.ev_txid,
                                            _cancel_handed.ev_id, true) = 1))
        OR EXISTS (
        SELECT 1 FROM pglogq.subscription c
          JOIN pglogq.handed_run r ON r.sub_id = c.sub_id
         WHERE c.queue_id = _cancel_handed.queue_id AND c.parent_id IS NULL
           AND pg_visible_in_snapshot(_cancel_handed.ev_txid, r.to_snap)
           AND (r.from_snap IS NULL OR NOT pg_visible_in_snapshot(_cancel_handed.ev_txid, r.from_snap)))
        OR EXISTS (
        SELECT 1 FROM pglogq.attempt a
          JOIN pglogq.subscription s ON s.sub_id = a.sub_id
         WHERE s.queue_id = _cancel_handed.queue_id AND a.msg_id = _cancel_handed.ev_id
           AND a.ev_txid = _cancel_handed.ev_txid);
END $$;
