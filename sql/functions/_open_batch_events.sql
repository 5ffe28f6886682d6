-- pglogq._open_batch_events(queue_id, consumer_sub_id, want): the events of a consumer's open
-- batches (its own and its workers') at one position against the page each holder was returned.
-- Parameters: queue_id; consumer_sub_id  the consumer's subscription row (parent_id NULL);
--             want  0: in the page receive returned last (handed, not acknowledged); 1: after it
--             (not returned yet); after_txid, after_id  only the events after this key in
--             transaction order (NULL: from the start); lim  at most this many events of each
--             holder, the first in transaction order (NULL: all); msg_type  only events of this
--             type (NULL: any); skip_ids  events left out (NULL: none); leases_only  only the
--             leases of a share consumer's workers (not the batch its consumer row hands out)
-- Returns:    rows (holder, ev_id, ev_type, ev_time, ev_retry, ev_priority, ev_txid): holder is
--             the sub_id of the consumer or worker whose batch holds the event.  Cancelled events
--             are left out.
-- Raises:     nothing.
-- Tables:     subscription, tick, event, cancelled (read).
-- The stream of a partition holds the events of its partition only; on a queue with an urgent
-- lane, its stream the urgent events only, and the consumer and its workers the others.
-- Reads a batch the way _batch_page does: the txids from the prev tick's xmax to the cur tick's
-- xmax, plus those running at the prev tick and committed at the cur one, as one range of the
-- (ev_txid, ev_id) index from the lowest of them (never from the prev tick's xmin, which a long
-- transaction anywhere in the cluster holds far back).  Plain key
-- comparisons against the page's keys come before the rule itself (_page_position), which then
-- runs on the page's rows only (a call per row of a 10,000-event batch cost 0.6 s).
-- Bounded by what is asked: each holder's events are read in (ev_txid, ev_id) index order from
-- the larger of after and, when the batch is read in transaction order (a big batch, or one with
-- only default-priority events: one probe of the priority index), the page's start (want 0) or
-- end (want 1); want 0 of such a batch stops at the page's end, want 1 at a lease's end (the rest
-- of the batch is other workers' leases: a share consumer's leases cost their own events), and
-- lim stops the read: a page
-- of jobs costs its rows, not the batch (a 10,000-event batch cost 25 ms a page).  enable_sort
-- off, as in _batch_page: the children's estimates (often not analysed) made the planner read
-- the whole rest of the batch and sort it, where the index gives the order.  jit off: a
-- plan over a big queue's estimates passed jit_above_cost, and compiling cost far more than the
-- query.  enable_seqscan off: the cancel markers are probed by their primary key whatever the
-- statistics the session's plans were made with (see jobs).
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq._open_batch_events(
    queue_id integer, consumer_sub_id integer, want integer, after_txid xid8 DEFAULT NULL,
    after_id bigint DEFAULT NULL, lim integer DEFAULT NULL, msg_type text DEFAULT NULL,
    skip_ids bigint[] DEFAULT NULL, leases_only boolean DEFAULT false)
RETURNS TABLE (holder integer, ev_id bigint, ev_type text, ev_time timestamptz, ev_retry integer,
               ev_priority smallint, ev_txid xid8)
LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_sort = off
SET enable_seqscan = off
SET jit = off AS $$
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
                      WHERE pg_visible_in_snapshot(r, tc.tick_snapshot)) AS xips,
               -- read in transaction order: the page's keys bound the read
               (h.batch_big OR NOT EXISTS (SELECT 1 FROM pglogq.event p
                                            WHERE p.ev_queue = _open_batch_events.queue_id AND p.ev_priority <> 100
                                              AND p.ev_txid >= pg_snapshot_xmin(tp.tick_snapshot)
                                              AND p.ev_txid < pg_snapshot_xmax(tc.tick_snapshot))) AS txorder
          FROM pglogq.subscription h
          JOIN pglogq.tick tp ON tp.queue_id = _open_batch_events.queue_id AND tp.tick_id = h.batch_prev_tick
          JOIN pglogq.tick tc ON tc.queue_id = _open_batch_events.queue_id AND tc.tick_id = h.batch_cur_tick
         WHERE (h.sub_id = _open_batch_events.consumer_sub_id OR h.parent_id = _open_batch_events.consumer_sub_id)
           AND h.batch_id IS NOT NULL
           AND (_open_batch_events.want = 1 OR h.page_end_txid IS NOT NULL)
           AND (NOT _open_batch_events.leases_only OR h.lease_end_txid IS NOT NULL)
    ), hb AS (
        -- each holder's start key (the larger of after and the page's bound) and its last key:
        -- for want 0 its page's, for want 1 its lease's (a worker of a share consumer)
        SELECT hs.*, b.b_txid, b.b_id,
               CASE WHEN b.b_txid IS NULL
                         OR (_open_batch_events.after_txid IS NOT NULL
                             AND (_open_batch_events.after_txid, _open_batch_events.after_id) > (b.b_txid, b.b_id))
                    THEN _open_batch_events.after_txid ELSE b.b_txid END AS k_txid,
               CASE WHEN b.b_txid IS NULL
                         OR (_open_batch_events.after_txid IS NOT NULL
                             AND (_open_batch_events.after_txid, _open_batch_events.after_id) > (b.b_txid, b.b_id))
                    THEN _open_batch_events.after_id ELSE b.b_id END AS k_id,
               CASE WHEN NOT hs.txorder THEN NULL
                    WHEN _open_batch_events.want = 0 THEN (hs.hrow).page_end_txid
                    ELSE (hs.hrow).lease_end_txid END AS top_txid,
               CASE WHEN NOT hs.txorder THEN NULL
                    WHEN _open_batch_events.want = 0 THEN (hs.hrow).page_end_id
                    ELSE (hs.hrow).lease_end_id END AS top_id
          FROM hs, LATERAL (
              SELECT CASE WHEN NOT hs.txorder THEN NULL
                          WHEN _open_batch_events.want = 0 THEN (hs.hrow).page_txid
                          ELSE coalesce((hs.hrow).page_end_txid, (hs.hrow).page_txid) END AS b_txid,
                     CASE WHEN NOT hs.txorder THEN NULL
                          WHEN _open_batch_events.want = 0 THEN (hs.hrow).page_id
                          ELSE coalesce((hs.hrow).page_end_id, (hs.hrow).page_id) END AS b_id) b
    ), hl AS (
        -- the batch's lowest possible txid: the prev tick's xmax, or the lowest of its running
        -- txids that committed by the cur tick (never its xmin, which a long transaction
        -- anywhere in the cluster holds far back)
        SELECT hb.*, least(pg_snapshot_xmax(hb.prev_snap), (SELECT min(r) FROM unnest(hb.xips) r)) AS low
          FROM hb
    ), hk AS (
        SELECT hl.*,
               CASE WHEN hl.k_txid IS NOT NULL AND (hl.k_txid, hl.k_id) > (hl.low, -1::bigint)
                    THEN hl.k_txid ELSE hl.low END AS s_txid,
               CASE WHEN hl.k_txid IS NOT NULL AND (hl.k_txid, hl.k_id) > (hl.low, -1::bigint)
                    THEN hl.k_id ELSE -1::bigint END AS s_id
          FROM hl
    )
    SELECT y.sub_id, y.ev_id, y.ev_type, y.ev_time, y.ev_retry, y.ev_priority, y.ev_txid
      FROM hk hb JOIN LATERAL (
          SELECT hb.sub_id, ev.ev_id, ev.ev_type, ev.ev_time, ev.ev_retry, ev.ev_priority, ev.ev_txid
            FROM pglogq.event ev
           WHERE ev.ev_queue = _open_batch_events.queue_id
             -- one index range: from the start key (at the earliest the batch's lowest txid) to
             -- the cur tick's xmax
             AND (ev.ev_txid, ev.ev_id) > (hb.s_txid, hb.s_id)
             AND ev.ev_txid < pg_snapshot_xmax(hb.cur_snap)
             AND (ev.ev_txid, ev.ev_id) <= (coalesce(hb.top_txid, pg_snapshot_xmax(hb.cur_snap)), coalesce(hb.top_id, -1))
             AND (ev.ev_txid >= pg_snapshot_xmax(hb.prev_snap) OR ev.ev_txid = ANY (hb.xips))
             AND pg_visible_in_snapshot(ev.ev_txid, hb.cur_snap)
             AND NOT pg_visible_in_snapshot(ev.ev_txid, hb.prev_snap)
             AND (ev.ev_owner IS NULL OR ev.ev_owner = _open_batch_events.consumer_sub_id)
             AND (_open_batch_events.msg_type IS NULL OR ev.ev_type = _open_batch_events.msg_type)
             AND (_open_batch_events.skip_ids IS NULL OR NOT (ev.ev_id = ANY (_open_batch_events.skip_ids)))
             AND CASE WHEN coalesce((hb.hrow).stream, (hb.hrow).lease_stream) IS NULL
                      THEN NOT (lanes AND ev.ev_priority > 100)
                      -- the urgent lane's stream, or a lease cut from its batch
                      WHEN coalesce((hb.hrow).stream, (hb.hrow).lease_stream) = -1 THEN ev.ev_priority > 100
                      -- a share consumer's lane (_consumer_streams), or a lease cut from its batch
                      WHEN coalesce((hb.hrow).stream, (hb.hrow).lease_stream) <= -2
                      THEN ev.ev_id % 8 = -2 - coalesce((hb.hrow).stream, (hb.hrow).lease_stream)
                           AND NOT (lanes AND ev.ev_priority > 100)
                      ELSE ev.ev_partition = (hb.hrow).stream END  -- a partition's stream
             AND CASE WHEN _open_batch_events.want = 0 THEN
                      CASE WHEN (hb.hrow).batch_big
                           THEN ((hb.hrow).page_txid IS NULL
                                 OR (ev.ev_txid, ev.ev_id) > ((hb.hrow).page_txid, (hb.hrow).page_id))
                                AND (ev.ev_txid, ev.ev_id) <= ((hb.hrow).page_end_txid, (hb.hrow).page_end_id)
                           ELSE ((hb.hrow).page_txid IS NULL
                                 OR (-ev.ev_priority, ev.ev_txid, ev.ev_id)
                                    > (-(hb.hrow).page_prio, (hb.hrow).page_txid, (hb.hrow).page_id))
                                AND (-ev.ev_priority, ev.ev_txid, ev.ev_id)
                                    <= (-(hb.hrow).page_end_prio, (hb.hrow).page_end_txid, (hb.hrow).page_end_id) END
                  ELSE
                      CASE WHEN coalesce((hb.hrow).page_end_txid, (hb.hrow).page_txid) IS NULL THEN true
                           WHEN (hb.hrow).batch_big
                           THEN (ev.ev_txid, ev.ev_id) > (coalesce((hb.hrow).page_end_txid, (hb.hrow).page_txid),
                                                          coalesce((hb.hrow).page_end_id, (hb.hrow).page_id))
                           ELSE (-ev.ev_priority, ev.ev_txid, ev.ev_id)
                                > (-coalesce((hb.hrow).page_end_prio, (hb.hrow).page_prio),
                                   coalesce((hb.hrow).page_end_txid, (hb.hrow).page_txid),
                                   coalesce((hb.hrow).page_end_id, (hb.hrow).page_id)) END
                  END
             AND pglogq._page_position(hb.hrow, ev.ev_priority, ev.ev_txid, ev.ev_id) = _open_batch_events.want
             -- a per-row probe of the markers' primary key (OFFSET 0: never a hash of them all)
             AND NOT EXISTS (SELECT 1 FROM pglogq.cancelled m
                              WHERE m.queue_id = _open_batch_events.queue_id AND m.msg_id = ev.ev_id OFFSET 0)
           ORDER BY ev.ev_txid, ev.ev_id
           LIMIT _open_batch_events.lim) y ON true;
END $$;
