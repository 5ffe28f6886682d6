-- pglogq._tick(queue_id, force): write the next tick of one queue if its thresholds say so.
-- Parameters: queue_id; force  tick whatever the thresholds say (and wait for a concurrent ticker)
-- Returns:    the new tick id, or NULL when no tick was due (or another ticker holds the queue).
-- Raises:     PQ015 the new snapshot is older than the last tick's (txids went backwards:
--             a database restored into another cluster).
-- Tables:     tick (insert), event (probe for committed, unticked events).
-- enable_seqscan is off in here: the probes must stay index probes even on a child without
-- statistics (a freshly loaded million-row table), or every ticker pass would scan it.
-- Ticks of one queue are serialised by a transaction advisory lock, so a tick's snapshot is
-- never older than its predecessor's.  The ticking transaction's own xid is marked as running
-- in the snapshot, so events it sent itself are never in a batch before it commits.
CREATE OR REPLACE FUNCTION pglogq._tick(queue_id integer, force boolean)
RETURNS bigint LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
DECLARE
    q pglogq.queue;
    last pglogq.tick;
    snap pg_snapshot;
    me xid8;
    cur_seq bigint;
    pending boolean;
    xips text;
    xip_arr xid8[];
BEGIN
    IF force THEN
        PERFORM pg_advisory_xact_lock(hashtext('pglogq.tick'), _tick.queue_id);
    ELSIF NOT pg_try_advisory_xact_lock(hashtext('pglogq.tick'), _tick.queue_id) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = _tick.queue_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT * INTO last FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    cur_seq := coalesce(pg_sequence_last_value(q.event_seq), 0);
    IF NOT force THEN
        -- committed events not yet covered by the last tick?  (uncommitted ones are invisible here)
        xip_arr := ARRAY(SELECT pg_snapshot_xip(last.tick_snapshot));
        pending := EXISTS (SELECT 1 FROM pglogq.event e
                            WHERE e.ev_queue = q.queue_id
                              AND e.ev_txid >= pg_snapshot_xmax(last.tick_snapshot))
                   OR (cardinality(xip_arr) > 0
                       AND EXISTS (SELECT 1 FROM pglogq.event e
                                    WHERE e.ev_queue = q.queue_id AND e.ev_txid = ANY (xip_arr)));
        IF NOT ((pending AND (cur_seq - last.tick_event_seq >= q.ticker_max_count
                              OR clock_timestamp() - last.tick_time >= q.ticker_max_lag))
                OR clock_timestamp() - last.tick_time >= q.ticker_idle_period) THEN
            RETURN NULL;
        END IF;
    END IF;
    me := pg_current_xact_id();
    snap := pg_current_snapshot();
    IF pg_visible_in_snapshot(me, snap) THEN
        -- our own xid is visible to ourselves; mark it running for everybody else
        SELECT string_agg(x::text, ',' ORDER BY x) INTO xips
          FROM (SELECT pg_snapshot_xip(snap) AS x UNION SELECT me) s;
        snap := format('%s:%s:%s', least(pg_snapshot_xmin(snap), me), pg_snapshot_xmax(snap), xips)::pg_snapshot;
    END IF;
    IF pg_snapshot_xmax(snap) < pg_snapshot_xmax(last.tick_snapshot) THEN
        RAISE EXCEPTION 'transaction ids went backwards on queue "%" (last tick xmax %, now %)',
            q.queue_name, pg_snapshot_xmax(last.tick_snapshot), pg_snapshot_xmax(snap)
            USING ERRCODE = 'PQ015',
                  HINT = 'this database looks restored into another cluster; ticking would mis-batch events. '
                         'Recreate the queues (or run pglogq.reset_after_restore()) before ticking.';
    END IF;
    INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq)
    VALUES (q.queue_id, last.tick_id + 1, clock_timestamp(), snap, cur_seq);
    PERFORM pg_notify('pglogq.' || q.queue_name, (last.tick_id + 1)::text);
    RETURN last.tick_id + 1;
END $$;
