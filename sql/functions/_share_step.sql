-- pglogq._share_step(h, batch_id, last_msg_id, last_txid, queue_name, consumer_name, max_messages, worker_name, start_first): ack_receive of a share worker's lease cut from a lane: the lease acknowledged and the worker's next lease cut, in one write of its row.
-- Parameters: h  the worker's row, locked and checked by ack_receive (its page is the lease it
--             acknowledges); the others as ack_receive's
-- Returns:    setof pglogq.message: the next lease, as receive returns it (batch_id its new id).
-- Raises:     what ack and receive raise, through them: this short way serves only the usual
--             case and leaves every other to ack, then receive (a window, an urgent lane, a
--             sharded or partitioned queue, a lease of another shape, an argument out of
--             range, a silent worker's lease waiting (_lease_waits), no lane with a batch being
--             handed out and free, a batch with events of another priority, ticks gone).
-- Tables:     sub_state (one update of the worker's row: the lease acknowledged and the next
--             one; the lane's row locked through _share_lane, its frontier moved through
--             _share_advance), progress and attempt (the worker's rows deleted, as
--             _close_batch does), batch_seq, queue and subscriber (read), tick, event and
--             cancelled (read).
-- Why: a worker taking one job at a time (leases of one event) spends most of its server time
-- on its fused ack and receive, about twice a SKIP LOCKED claim before this way existed.  The
-- general way closes the acknowledged lease (ack, _close_batch: a write of the worker's row),
-- then receive reads the worker's row again, cuts the lease (_take_batch, _share_lease: the
-- events read to find its end) and writes the row again.  Here the row is written once and
-- the events are read once.  Measured on PostgreSQL 15 (one worker, leases of one event,
-- statement tracking of top-level statements): the fused call took 655 us of server time the
-- general way, 389 us this way.
-- The read is receive's page read of a lease (the transaction-order query of _batch_page, see
-- receive: a batch with events of another priority goes the general way), bounded by the lane;
-- the page is the whole lease (its end is its last event, page_more false), as receive's short
-- way makes it; the row written is what ack's close and receive's write would leave.
-- Copies: answered by the queue's copy (ack_receive finds it; see _queue_functions), whose calls
-- of receive go to the queue's copy of receive.
CREATE OR REPLACE FUNCTION pglogq._share_step(
    h pglogq.subscription, batch_id bigint, last_msg_id bigint, last_txid xid8, queue_name text,
    consumer_name text, max_messages integer, worker_name text, start_first integer)
RETURNS SETOF pglogq.message LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_sort = off
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    q pglogq.queue;
    lanes boolean;
    share_window integer;
    handed bigint;
    lane integer;
    ln record;  -- the lane's batch
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    hi xid8;
    short boolean := false;  -- the short way serves this call
    from_txid xid8;
    from_id bigint;
    any_cancel boolean;
    new_id bigint;
    n integer := 0;
    pm pglogq.message;
    first_row pglogq.message;
    last_row pglogq.message;
BEGIN
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = h.queue_id;
    SELECT s.lanes, st.share_window, st.share_handed INTO lanes, share_window, handed
      FROM pglogq.subscriber s JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
     WHERE s.sub_id = h.parent_id;
    IF lanes AND share_window IS NULL AND NOT q.urgent_lane AND NOT q.sharded AND q.partitions <= 1
       AND max_messages BETWEEN 1 AND 100000 AND (start_first IS NULL OR start_first BETWEEN 0 AND 100000)
       AND h.page_end_id = last_msg_id AND h.page_end_txid = last_txid AND h.hold_id IS NULL
       AND NOT h.page_more AND h.lease_stream <= -2
       AND NOT pglogq._lease_waits(h.parent_id, h.sub_id, q.dead_interval) THEN
        lane := pglogq._share_lane(h.parent_id, h.sub_id % 8, '{}');
    END IF;
    IF lane IS NOT NULL THEN
        SELECT s.stream, st.batch_id, st.batch_prev_tick, st.batch_cur_tick, st.batch_big,
               st.page_prio, st.page_txid, st.page_id INTO ln
          FROM pglogq.subscriber s JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
         WHERE st.sub_id = lane;
        IF ln.batch_id IS NOT NULL THEN
            SELECT p.tick_snapshot, t.tick_snapshot INTO prev_snap, cur_snap
              FROM pglogq.tick p, pglogq.tick t
             WHERE p.queue_id = q.queue_id AND p.tick_id = ln.batch_prev_tick
               AND t.queue_id = q.queue_id AND t.tick_id = ln.batch_cur_tick;
            hi := pg_snapshot_xmax(cur_snap);
            -- the lane's batch in transaction order (see receive's usual page)
            short := hi IS NOT NULL
                     AND (ln.batch_big OR NOT EXISTS (SELECT 1 FROM pglogq.event e
                                                      WHERE e.ev_queue = q.queue_id AND e.ev_priority <> 100
                                                        AND e.ev_txid >= pg_snapshot_xmin(prev_snap)
                                                        AND e.ev_txid < hi));
        END IF;
    END IF;
    IF short THEN
        -- the acknowledged lease ends (the rest of _close_batch's work; its row is written below)
        DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id;
        DELETE FROM pglogq.attempt a WHERE a.sub_id = h.sub_id;
        any_cancel := EXISTS (SELECT 1 FROM pglogq.cancelled x
                               WHERE x.queue_id = q.queue_id
                                 AND x.ev_txid >= pg_snapshot_xmin(prev_snap) AND x.ev_txid < hi);
        from_txid := coalesce(ln.page_txid, pg_snapshot_xmin(prev_snap));
        from_id := CASE WHEN ln.page_txid IS NULL THEN -1 ELSE ln.page_id END;
        new_id := nextval('pglogq.batch_seq');
        FOR pm IN SELECT new_id, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry,
                         e.ev_time, e.ev_priority, e.ev_txid
                    FROM pglogq.event e
                   WHERE e.ev_queue = q.queue_id
                     AND (e.ev_txid, e.ev_id) > (from_txid, from_id) AND e.ev_txid < hi
                     AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
                     AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
                     AND (e.ev_owner IS NULL OR e.ev_owner = h.parent_id)
                     AND e.ev_id % 8 = -2 - ln.stream
                     AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled x
                                                        WHERE x.queue_id = q.queue_id AND x.msg_id = e.ev_id
                                                        OFFSET 0))
                   ORDER BY e.ev_txid, e.ev_id
                   LIMIT max_messages + 1 LOOP
            n := n + 1;
            EXIT WHEN n > max_messages;  -- one more than the page: the lane's batch goes on
            IF n = start_first THEN
                first_row := pm;
            END IF;
            last_row := pm;
            RETURN NEXT pm;
        END LOOP;
        IF n > 0 THEN
            IF start_first IS NULL OR (start_first > 0 AND n <= start_first) THEN
                first_row := last_row;
            END IF;
            UPDATE pglogq.sub_state s
               SET batch_id = new_id, batch_prev_tick = ln.batch_prev_tick, batch_cur_tick = ln.batch_cur_tick,
                   batch_big = ln.batch_big, batch_started_at = clock_timestamp(),
                   page_prio = ln.page_prio, page_txid = ln.page_txid, page_id = ln.page_id,
                   page_end_prio = last_row.priority, page_end_txid = last_row.txid, page_end_id = last_row.msg_id,
                   page_more = false, page_marks = start_first IS NOT NULL,
                   started_prio = first_row.priority, started_txid = first_row.txid, started_id = first_row.msg_id,
                   suspect_prio = NULL, suspect_txid = NULL, suspect_id = NULL,
                   released_at = NULL, heartbeat_at = clock_timestamp(), last_seen = clock_timestamp(),
                   lease_worker = NULL, hold_txid = NULL, hold_id = NULL, hold_until = NULL,
                   lease_end_prio = last_row.priority, lease_end_txid = last_row.txid, lease_end_id = last_row.msg_id,
                   lease_stream = ln.stream, lease_seq = coalesce(handed, 0)
             WHERE s.sub_id = h.sub_id;
            PERFORM pglogq._share_advance(lane, h.parent_id, least(n, max_messages), n > max_messages,
                                          last_row.priority, last_row.txid, last_row.msg_id);
            RETURN;
        END IF;
        -- nothing left in the lane's batch for this consumer (cancelled, others' retries): closed,
        -- and the general way goes on from the next one
        PERFORM pglogq._close_batch(lane);
    END IF;
    PERFORM pglogq.ack(batch_id, last_msg_id, last_txid);
    RETURN QUERY SELECT * FROM pglogq.receive(queue_name, consumer_name, max_messages, worker_name, start_first);
END $$;
