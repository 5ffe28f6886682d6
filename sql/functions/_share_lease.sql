-- pglogq._share_lease(q, consumer_id, h, lease_size): give worker row h of a share consumer a
-- lease: the next events that no worker has been given yet, urgent ones first.
-- Parameters: q  the queue row; consumer_id  the share consumer's sub_id; h  the worker's row
--             (locked by the caller, no batch open); lease_size  events at most (1..100000)
-- Returns:    h with its batch fields set to the lease (not yet written): the batch it is cut
--             from (its ticks, big flag), its page start at that batch's hand-out frontier,
--             lease_end_* at the key of the lease's last event, lease_stream -1 for a lease of
--             the urgent lane (else NULL), lease_seq its place in the consumer's hand-out count;
--             h unchanged when nothing is left up to the last tick, or the window is full.
-- Tables:     subscription (lock of the consumer row, and of its urgent lane's stream on a queue
--             with one; a lane's state row locked through _share_lane), sub_state (update of the
--             row the lease is cut from: the batch it hands out, and the frontier through
--             _share_advance; of the consumer row: the hand-out count), tick (read), event and
--             cancelled (read, through _batch_page), batch_seq (the lease's batch id).
-- The row a lease is cut from holds the batch being handed out, as a holder holds an open batch
-- (so rotation, retention, seek and lag treat it as one), and its page key is the hand-out
-- frontier: every event of the batch up to it is in some lease.  That row is the consumer's own
-- (its cursor moves past the batch when it is opened, as for cooperating workers) or, on a queue
-- with an urgent lane, the lane's stream (stream -1, its own cursor, the urgent events only),
-- which is tried first: an urgent event is leased before any ordinary one, as the lane is read
-- first by every receive.  The batch is closed as soon as its last event is leased; each lease
-- then holds its own place until acknowledged.  The events are read once more by the worker's
-- receive, bounded by its lease end.  receive cuts the usual lease (a lane's batch being handed
-- out) on a short way of its own, reading the events once; this is the general way.
-- The window: the consumer counts the events it hands out (share_handed) and each lease keeps
-- the count at its first event (lease_seq), so count - the oldest open lease's lease_seq is the
-- number of events handed out from that lease's first event on: leased, or done but behind it.
-- With share_window set, a lease takes at most the room left, and none while the window is full:
-- workers get nothing until the oldest lease is acknowledged (or ends otherwise: seek,
-- retention, ceded and taken over leases keep their place).  Leases taken over (a silent
-- worker's, ceded events) are in the window already and are handed out whatever its room.
-- Concurrency: acquisitions of one consumer serialise on the consumer row (held to the end of the
-- caller's transaction: receive's), after the worker's own row (the order every caller takes),
-- then the lane's stream row.
CREATE OR REPLACE FUNCTION pglogq._share_lease(q pglogq.queue, consumer_id integer, h pglogq.subscription,
                                               lease_size integer)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET jit = off AS $$
DECLARE
    c pglogq.subscription;
    src pglogq.subscription;
    part smallint;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    rows pglogq.message[];
    n integer := 0;
    k integer;
    oldest bigint;
    last_row pglogq.message;
    lanes boolean;
    serial boolean;
    start integer;
    lane integer;
    tried smallint[] := '{}';
    sources smallint[];
    moved boolean := false;
BEGIN
    lanes := EXISTS (SELECT 1 FROM pglogq.subscriber s WHERE s.parent_id = consumer_id AND s.stream <= -2);
    SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = consumer_id;
    -- one acquisition at a time: without lanes (a consumer subscribed before they existed), or
    -- with a window, whose count lives on the consumer's row
    serial := NOT lanes OR c.share_window IS NOT NULL;
    IF serial THEN
        SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = consumer_id FOR NO KEY UPDATE;
    END IF;
    IF c.share_window IS NOT NULL THEN
        SELECT min(w.lease_seq) INTO oldest FROM pglogq.subscription w
         WHERE w.parent_id = consumer_id AND w.stream IS NULL AND w.batch_id IS NOT NULL;
        lease_size := least(lease_size, c.share_window
                                        - (coalesce(c.share_handed, 0) - coalesce(oldest, c.share_handed, 0)));
        IF lease_size < 1 THEN
            RETURN h;  -- the window is full
        END IF;
    END IF;
    -- where leases are cut from, in order: the urgent lane (a queue with one), then the lanes
    -- (below), or the consumer's own row
    sources := CASE WHEN q.urgent_lane THEN ARRAY[-1]::smallint[] ELSE '{}' END;
    IF NOT lanes THEN
        sources := sources || NULL::smallint;
    ELSE
        start := h.sub_id % 8;
    END IF;
    FOR i IN 1 .. cardinality(sources) + CASE WHEN lanes THEN 8 ELSE 0 END LOOP
        IF i > cardinality(sources) THEN
            -- the next lane that may have something (a batch out, or a tick it has not read),
            -- starting at one that depends on the worker (workers asking together start apart);
            -- a lane another worker is cutting on is passed over, never waited for
            lane := pglogq._share_lane(consumer_id, start, tried);
            EXIT WHEN lane IS NULL;
            SELECT * INTO src FROM pglogq.subscription s WHERE s.sub_id = lane;
            part := src.stream;
            tried := tried || part;
        ELSE
            part := sources[i];
            IF part IS NULL THEN
                src := c;
            ELSE
                -- the urgent lane: with lanes, passed over while another worker cuts on it
                IF lanes THEN
                    SELECT * INTO src FROM pglogq.subscription s
                     WHERE s.parent_id = consumer_id AND s.stream = part FOR NO KEY UPDATE SKIP LOCKED;
                ELSE
                    SELECT * INTO src FROM pglogq.subscription s
                     WHERE s.parent_id = consumer_id AND s.stream = part FOR NO KEY UPDATE;
                END IF;
                CONTINUE WHEN NOT FOUND;
            END IF;
        END IF;
        LOOP
            IF src.batch_id IS NULL THEN
                src := pglogq._take_batch(q, consumer_id, src);
                EXIT WHEN src.batch_id IS NULL;  -- nothing new up to the last tick
                UPDATE pglogq.sub_state s
                   SET last_tick = src.last_tick, batch_id = src.batch_id, batch_prev_tick = src.batch_prev_tick,
                       batch_cur_tick = src.batch_cur_tick, batch_big = src.batch_big,
                       batch_started_at = src.batch_started_at,
                       page_prio = NULL, page_txid = NULL, page_id = NULL, last_seen = clock_timestamp()
                 WHERE s.sub_id = src.sub_id;
                moved := moved OR part <= -2;
            END IF;
            SELECT p.tick_snapshot, t.tick_snapshot INTO prev_snap, cur_snap
              FROM pglogq.tick p, pglogq.tick t
             WHERE p.queue_id = q.queue_id AND p.tick_id = src.batch_prev_tick
               AND t.queue_id = q.queue_id AND t.tick_id = src.batch_cur_tick;
            IF prev_snap IS NULL OR cur_snap IS NULL THEN
                RAISE EXCEPTION 'tick % or % of the batch of share consumer "%" is gone',
                    src.batch_prev_tick, src.batch_cur_tick, c.consumer_name
                    USING ERRCODE = 'PQ017', HINT = 'seek the consumer (force => true) to a tick that still exists';
            END IF;
            rows := ARRAY(SELECT m FROM pglogq._batch_page(q.queue_id, consumer_id, prev_snap, cur_snap, src.batch_big,
                                                            src.page_prio, src.page_txid, src.page_id, lease_size + 1,
                                                            part, q.urgent_lane AND coalesce(part, -2) <= -2) m);
            n := cardinality(rows);
            EXIT WHEN n > 0;
            -- nothing left to hand out in this batch: close it, then the next one
            PERFORM pglogq._close_batch(src.sub_id);
            src.batch_id := NULL;
            src.page_prio := NULL;
            src.page_txid := NULL;
            src.page_id := NULL;
        END LOOP;
        EXIT WHEN n > 0;
    END LOOP;
    IF lanes AND (moved OR n = 0) THEN
        -- the consumer's cursor follows its slowest lane, so that what reads it (rotation,
        -- retention, lag) stays on the safe side: a lane whose move is not committed yet counts
        -- where it was.  Locked only when it is behind, and only when free (else the next
        -- acquisition or idle poll moves it): no write when nothing moved
        SELECT min(x.last_tick) INTO oldest FROM pglogq.subscription x
         WHERE x.parent_id = consumer_id AND x.stream <= -2;
        IF oldest > c.last_tick THEN
            PERFORM 1 FROM pglogq.sub_state s WHERE s.sub_id = consumer_id FOR NO KEY UPDATE SKIP LOCKED;
            IF FOUND THEN
                UPDATE pglogq.sub_state s SET last_tick = oldest
                 WHERE s.sub_id = consumer_id AND s.last_tick < oldest;
            END IF;
        END IF;
    END IF;
    IF n = 0 THEN
        RETURN h;
    END IF;
    k := least(n, lease_size);
    last_row := rows[k];
    h.batch_id := nextval('pglogq.batch_seq');
    h.batch_prev_tick := src.batch_prev_tick;
    h.batch_cur_tick := src.batch_cur_tick;
    h.batch_big := src.batch_big;
    h.batch_started_at := clock_timestamp();
    h.page_prio := src.page_prio;
    h.page_txid := src.page_txid;
    h.page_id := src.page_id;
    h.page_end_prio := NULL;
    h.page_end_txid := NULL;
    h.page_end_id := NULL;
    h.page_more := NULL;
    h.page_marks := NULL;
    h.started_prio := NULL;
    h.started_txid := NULL;
    h.started_id := NULL;
    h.suspect_prio := NULL;
    h.suspect_txid := NULL;
    h.suspect_id := NULL;
    h.lease_end_prio := last_row.priority;
    h.lease_end_txid := last_row.txid;
    h.lease_end_id := last_row.msg_id;
    h.lease_stream := part;
    h.lease_seq := coalesce(c.share_handed, 0);
    -- the frontier moves, or the lease takes the rest of the batch
    PERFORM pglogq._share_advance(src.sub_id, consumer_id, k, n > lease_size,
                                  last_row.priority, last_row.txid, last_row.msg_id);
    IF serial AND (n <= lease_size OR src.sub_id <> consumer_id) THEN
        UPDATE pglogq.sub_state s SET share_handed = coalesce(s.share_handed, 0) + k WHERE s.sub_id = consumer_id;
    END IF;
    RETURN h;
END $$;
