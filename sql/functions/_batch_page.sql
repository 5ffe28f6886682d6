-- pglogq._batch_page(...): one page of a batch, in delivery order, starting after a key.
-- Parameters: queue_id; owner  the consumer's sub_id (retried/replayed events of others are skipped);
--             prev_snap, cur_snap  the batch's tick snapshots; big  stream in (txid, id) order;
--             after_prio, after_txid, after_id  the key of the last acknowledged event (NULL: start);
--             lim  rows to return at most; part  the partition of a stream (its events only;
--             with big), -1 for the urgent lane's stream (the urgent events only: priority above
--             100, in priority order), -2 - k for lane k of a share consumer (the events with
--             ev_id % 8 = k, see _consumer_streams; with ordinary on a queue with an urgent
--             lane), NULL for all; ordinary  true: leave the urgent events out
--             (a consumer or worker of a queue with an urgent lane); since  a partition's stream:
--             the start of its batch (the events it buried since are not handed again)
-- Returns:    setof pglogq.message (batch_id NULL), ordered by priority desc, txid, id
--             (by txid, id when big, or when every event of the batch has the default priority:
--             the same order, read from the index without a sort).
-- Tables:     event (read), cancelled (read), dead_letter (read, a partition's stream only).
-- The events of a batch are those whose transaction is visible in cur_snap and not in prev_snap.
-- The scan is bounded to [xmax(prev), xmax(cur)) plus the xids that were running at prev, and
-- reads every child table of the queue, so a producer that wrote into an older child (an old
-- REPEATABLE READ snapshot across a rotation) is still found.
-- Plan of the big (streamed) path: the children are often not analysed yet (new, or just
-- truncated by rotation), so the planner guesses a few rows and picks bitmap scan + sort, which
-- reads the whole rest of the batch for every page (quadratic in the batch size).  enable_sort
-- is off inside this function (and only here), which leaves the ordered (ev_txid, ev_id) index
-- scans: each page reads only its own rows.  The other path must sort whatever the setting
-- (no index has its order), so its plan does not change; jit is off because the sort penalty
-- would otherwise push that plan's cost past jit_above_cost (JIT costs far more than the query).
-- Cancel markers: tested only when one lies in the batch's transaction range (one probe of the
-- (queue_id, ev_txid) index), then by one primary-key probe per row read: OFFSET 0 keeps each
-- test a per-row subplan, where an anti-join let the planner hash every marker of the queue for
-- every page (whatever the page size: 19 ms a page at 100,000 markers).  enable_seqscan is off
-- in here (and in receive): a plan made while the markers filled a page (analysed so) probed them
-- by a scan of the table, kept after a mass cancel until the next ANALYZE (every marker read for
-- every event of the batch); the txid index cannot serve that probe (its predicate, migration
-- 0042), which a plan made so took at the same cost (every marker of the queue read per event).
-- receive reads the transaction-order case of its usual page itself, with the same query (one
-- copy of each row fewer), and so does _share_step for a lease cut from a lane: a change of that
-- query here is made there too (tests/sql/test_rule_owners.py checks that receive and this
-- return the same rows, tests/sql/test_share_step.py that _share_step and receive do).
CREATE OR REPLACE FUNCTION pglogq._batch_page(
    queue_id integer, owner integer, prev_snap pg_snapshot, cur_snap pg_snapshot, big boolean,
    after_prio integer, after_txid xid8, after_id bigint, lim integer, part smallint DEFAULT NULL,
    ordinary boolean DEFAULT false, since timestamptz DEFAULT NULL)
RETURNS SETOF pglogq.message LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_sort = off
SET enable_seqscan = off
SET jit = off AS $$
DECLARE
    lo xid8 := pg_snapshot_xmax(prev_snap);
    hi xid8 := pg_snapshot_xmax(cur_snap);
    xip_arr xid8[] := ARRAY(SELECT x FROM pg_snapshot_xip(prev_snap) x
                             WHERE pg_visible_in_snapshot(x, cur_snap));
    -- cancel markers of this batch's transactions only (see the cancel test below)
    any_cancel boolean := EXISTS (SELECT 1 FROM pglogq.cancelled c
                                   WHERE c.queue_id = _batch_page.queue_id
                                     AND c.ev_txid >= pg_snapshot_xmin(prev_snap) AND c.ev_txid < hi);
    -- a partition's stream: events this consumer buried in this batch (since its start) while an
    -- earlier event held the stream
    any_dead boolean := part >= 0 AND EXISTS (SELECT 1 FROM pglogq.dead_letter d
                                               WHERE d.sub_id = owner AND d.failed_at >= since);
    got bigint := 0;
    -- where a streamed page starts, as one row bound the (ev_txid, ev_id) index seeks to: after
    -- the acknowledged event, else at the prev tick's xmin (id -1: every id of that txid).  An
    -- "after IS NULL OR (txid, id) > after" condition cannot be an index bound: every page then
    -- read the batch from its start, and draining a batch of 1,000,000 events was quadratic
    -- (about 12,000 events/s instead of 150,000)
    from_txid xid8 := coalesce(after_txid, pg_snapshot_xmin(prev_snap));
    from_id bigint := CASE WHEN after_txid IS NULL THEN -1 ELSE after_id END;
    -- a share consumer's lane (_consumer_streams): its events, read from the same index ranges
    lane smallint := CASE WHEN part <= -2 THEN -2 - part END;
BEGIN
    IF part = -1 THEN
        -- the urgent lane: the partial index of urgent events (the literal predicate matches it)
        RETURN QUERY
        SELECT NULL::bigint, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry, e.ev_time,
               e.ev_priority, e.ev_txid
          FROM pglogq.event e
         WHERE e.ev_queue = _batch_page.queue_id AND e.ev_priority > 100
           AND ((e.ev_txid >= lo AND e.ev_txid < hi) OR e.ev_txid = ANY (xip_arr))
           AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
           AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
           AND (after_txid IS NULL
                OR (-e.ev_priority, e.ev_txid, e.ev_id) > (-after_prio, after_txid, after_id))
           AND (e.ev_owner IS NULL OR e.ev_owner = owner)
           AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                              WHERE c.queue_id = _batch_page.queue_id AND c.msg_id = e.ev_id OFFSET 0))
         ORDER BY e.ev_priority DESC, e.ev_txid, e.ev_id
         LIMIT lim;
        RETURN;
    END IF;
    IF part >= 0 THEN
        -- one partition's stream: the (ev_partition, ev_txid, ev_id) index of partitioned queues
        RETURN QUERY
        SELECT NULL::bigint, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry, e.ev_time,
               e.ev_priority, e.ev_txid
          FROM pglogq.event e
         WHERE e.ev_queue = _batch_page.queue_id AND e.ev_partition = part
           AND (e.ev_txid, e.ev_id) > (from_txid, from_id) AND e.ev_txid < hi
           AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
           AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
           AND (e.ev_owner IS NULL OR e.ev_owner = owner)
           AND (NOT any_dead OR e.ev_owner IS NOT NULL
                OR NOT EXISTS (SELECT 1 FROM pglogq.dead_letter d
                                WHERE d.sub_id = owner AND d.msg_id = e.ev_id AND d.failed_at >= since))
           AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                              WHERE c.queue_id = _batch_page.queue_id AND c.msg_id = e.ev_id OFFSET 0))
         ORDER BY e.ev_partition, e.ev_txid, e.ev_id
         LIMIT lim;
        RETURN;
    END IF;
    -- a batch with no event of a priority other than the default (the partial index of
    -- migration 0022 answers in one probe; an urgent lane's events count too): its priority order
    -- is its transaction order, which the (ev_txid, ev_id) index gives without sorting the page
    IF NOT big AND NOT EXISTS (SELECT 1 FROM pglogq.event e
                                WHERE e.ev_queue = _batch_page.queue_id AND e.ev_priority <> 100
                                  AND e.ev_txid >= pg_snapshot_xmin(prev_snap) AND e.ev_txid < hi) THEN
        big := true;
    END IF;
    IF big THEN
        RETURN QUERY
        SELECT NULL::bigint, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry, e.ev_time,
               e.ev_priority, e.ev_txid
          FROM pglogq.event e
         WHERE e.ev_queue = _batch_page.queue_id
           AND (e.ev_txid, e.ev_id) > (from_txid, from_id) AND e.ev_txid < hi
           AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
           AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
           AND (e.ev_owner IS NULL OR e.ev_owner = owner)
           AND (NOT ordinary OR e.ev_priority <= 100)
           AND (lane IS NULL OR e.ev_id % 8 = lane)
           AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                              WHERE c.queue_id = _batch_page.queue_id AND c.msg_id = e.ev_id OFFSET 0))
         ORDER BY e.ev_txid, e.ev_id
         LIMIT lim;
        RETURN;
    END IF;
    IF after_txid IS NOT NULL THEN
        -- the rest of the acknowledged event's priority level, in index order (reads only the
        -- rows it returns, where re-sorting the whole batch for every page made small pages
        -- quadratic); then, if the page is not full, the lower levels as below
        RETURN QUERY
        SELECT NULL::bigint, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry, e.ev_time,
               e.ev_priority, e.ev_txid
          FROM pglogq.event e
         WHERE e.ev_queue = _batch_page.queue_id
           AND e.ev_txid >= pg_snapshot_xmin(prev_snap) AND e.ev_txid < hi
           AND (e.ev_txid, e.ev_id) > (after_txid, after_id)
           AND e.ev_priority = after_prio
           AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
           AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
           AND (e.ev_owner IS NULL OR e.ev_owner = owner)
           AND (NOT ordinary OR e.ev_priority <= 100)
           AND (lane IS NULL OR e.ev_id % 8 = lane)
           AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                              WHERE c.queue_id = _batch_page.queue_id AND c.msg_id = e.ev_id OFFSET 0))
         ORDER BY e.ev_txid, e.ev_id
         LIMIT lim;
        GET DIAGNOSTICS got = ROW_COUNT;
        IF got >= lim THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
    SELECT NULL::bigint, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry, e.ev_time,
           e.ev_priority, e.ev_txid
      FROM pglogq.event e
     WHERE e.ev_queue = _batch_page.queue_id
       AND ((e.ev_txid >= lo AND e.ev_txid < hi) OR e.ev_txid = ANY (xip_arr))
       AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
       AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
       AND (after_txid IS NULL OR e.ev_priority < after_prio)
       AND (e.ev_owner IS NULL OR e.ev_owner = owner)
       AND (NOT ordinary OR e.ev_priority <= 100)
       AND (lane IS NULL OR e.ev_id % 8 = lane)
       AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                          WHERE c.queue_id = _batch_page.queue_id AND c.msg_id = e.ev_id OFFSET 0))
     ORDER BY e.ev_priority DESC, e.ev_txid, e.ev_id
     LIMIT lim - got;
END $$;
