-- pglogq._open_batch_events(queue_id, consumer_sub_id, want): the events of a consumer's open
-- batches (its own and its workers') at one position against the page each holder was returned.
-- Parameters: queue_id; consumer_sub_id  the consumer's subscription row (parent_id NULL);
--             want  0: in the page receive returned last (handed, not acknowledged); 1: after it
--             (not returned yet)
-- Returns:    rows (holder, ev_id, ev_type, ev_time, ev_retry, ev_priority, ev_txid): holder is
--             the sub_id of the consumer or worker whose batch holds the event.
-- Raises:     nothing.
-- Tables:     subscription, tick, event (read).
-- The stream of a partition holds the events of its partition only; on a queue with an urgent
-- lane, its stream the urgent events only, and the consumer and its workers the others.
-- Reads a batch the way _batch_page does: the txids from the prev tick's xmax to the cur tick's
-- xmax, plus those running at the prev tick and committed at the cur one (never from the prev
-- tick's xmin, which a long transaction anywhere in the cluster holds far back).  Plain key
-- comparisons against the page's keys come before the rule itself (_page_position), which then
-- runs on the page's rows only (a call per row of a 10,000-event batch cost 0.6 s).
CREATE OR REPLACE FUNCTION pglogq._open_batch_events(queue_id integer, consumer_sub_id integer, want integer)
RETURNS TABLE (holder integer, ev_id bigint, ev_type text, ev_time timestamptz, ev_retry integer,
               ev_priority smallint, ev_txid xid8)
LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    lanes boolean := (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = _open_batch_events.queue_id);
BEGIN
    -- plpgsql, not sql: its statements get custom plans (a sql function's generic plan read the
    -- whole queue)
    RETURN QUERY
    WITH hs AS (
        SELECT h AS hrow, h.sub_id, tp.tick_snapshot AS prev_snap, tc.tick_snapshot AS cur_snap,
               ARRAY(SELECT r FROM pg_snapshot_xip(tp.tick_snapshot) r
                      WHERE pg_visible_in_snapshot(r, tc.tick_snapshot)) AS xips
          FROM pglogq.subscription h
          JOIN pglogq.tick tp ON tp.queue_id = h.queue_id AND tp.tick_id = h.batch_prev_tick
          JOIN pglogq.tick tc ON tc.queue_id = h.queue_id AND tc.tick_id = h.batch_cur_tick
         WHERE (h.sub_id = _open_batch_events.consumer_sub_id OR h.parent_id = _open_batch_events.consumer_sub_id)
           AND h.batch_id IS NOT NULL
           AND (_open_batch_events.want = 1 OR h.page_end_txid IS NOT NULL)
    ), ev AS (
        SELECT hs.hrow, hs.sub_id, hs.prev_snap, hs.cur_snap, x.ev_id, x.ev_type, x.ev_time, x.ev_retry,
               x.ev_priority, x.ev_txid, x.ev_owner, x.ev_partition
          FROM hs JOIN LATERAL (
              SELECT e.* FROM pglogq.event e
               WHERE e.ev_queue = _open_batch_events.queue_id
                 AND e.ev_txid >= pg_snapshot_xmax(hs.prev_snap) AND e.ev_txid < pg_snapshot_xmax(hs.cur_snap)) x ON true
        UNION ALL
        SELECT hs.hrow, hs.sub_id, hs.prev_snap, hs.cur_snap, x.ev_id, x.ev_type, x.ev_time, x.ev_retry,
               x.ev_priority, x.ev_txid, x.ev_owner, x.ev_partition
          FROM hs JOIN LATERAL (
              SELECT e.* FROM pglogq.event e
               WHERE e.ev_queue = _open_batch_events.queue_id AND e.ev_txid = ANY (hs.xips)) x ON true
    )
    SELECT ev.sub_id, ev.ev_id, ev.ev_type, ev.ev_time, ev.ev_retry, ev.ev_priority, ev.ev_txid
      FROM ev
     WHERE pg_visible_in_snapshot(ev.ev_txid, ev.cur_snap)
       AND NOT pg_visible_in_snapshot(ev.ev_txid, ev.prev_snap)
       AND (ev.ev_owner IS NULL OR ev.ev_owner = _open_batch_events.consumer_sub_id)
       AND CASE WHEN (ev.hrow).stream IS NULL THEN NOT (lanes AND ev.ev_priority > 100)
                WHEN (ev.hrow).stream = -1 THEN ev.ev_priority > 100  -- the urgent lane's stream
                ELSE ev.ev_partition = (ev.hrow).stream END  -- a partition's stream
       AND CASE WHEN _open_batch_events.want = 0 THEN
                CASE WHEN (ev.hrow).batch_big
                     THEN ((ev.hrow).page_txid IS NULL
                           OR (ev.ev_txid, ev.ev_id) > ((ev.hrow).page_txid, (ev.hrow).page_id))
                          AND (ev.ev_txid, ev.ev_id) <= ((ev.hrow).page_end_txid, (ev.hrow).page_end_id)
                     ELSE ((ev.hrow).page_txid IS NULL
                           OR (-ev.ev_priority, ev.ev_txid, ev.ev_id)
                              > (-(ev.hrow).page_prio, (ev.hrow).page_txid, (ev.hrow).page_id))
                          AND (-ev.ev_priority, ev.ev_txid, ev.ev_id)
                              <= (-(ev.hrow).page_end_prio, (ev.hrow).page_end_txid, (ev.hrow).page_end_id) END
            ELSE
                CASE WHEN coalesce((ev.hrow).page_end_txid, (ev.hrow).page_txid) IS NULL THEN true
                     WHEN (ev.hrow).batch_big
                     THEN (ev.ev_txid, ev.ev_id) > (coalesce((ev.hrow).page_end_txid, (ev.hrow).page_txid),
                                                    coalesce((ev.hrow).page_end_id, (ev.hrow).page_id))
                     ELSE (-ev.ev_priority, ev.ev_txid, ev.ev_id)
                          > (-coalesce((ev.hrow).page_end_prio, (ev.hrow).page_prio),
                             coalesce((ev.hrow).page_end_txid, (ev.hrow).page_txid),
                             coalesce((ev.hrow).page_end_id, (ev.hrow).page_id)) END
            END
       AND pglogq._page_position(ev.hrow, ev.ev_priority, ev.ev_txid, ev.ev_id) = _open_batch_events.want;
END $$;
