-- pglogq._take_batch(q, consumer_id, h, lease_size): give holder h a batch (h must have none).
-- Parameters: q  the queue row; consumer_id  the consumer's sub_id; h  the holder row (the
--             consumer itself, one of its cooperating workers, or the stream of one partition
--             of a partitioned queue), locked by the caller; lease_size  for a worker of a share
--             consumer, the most events its lease may hold (default 100)
-- Returns:    h with its batch fields set (not yet written), or h unchanged when no batch is ready;
--             for a worker of a share consumer, a lease (see _share_lease).
-- Tables:     subscription (lock and update of the consumer row, not for a partition's stream; takeover of a silent worker's
--             batch, closed through _close_batch), progress (the silent worker's rows deleted),
--             attempt (the silent worker's rows moved to h),
--             tick (read), batch_seq (a new batch id).
-- The batch id is the next value of pglogq.batch_seq, a plain unique number (see _holder); a
-- batch taken over gets a new id, so the silent worker's id is refused from then on.
-- A cooperating worker first takes over the open batch of a worker silent for longer than the
-- queue's dead_interval (or released by maintenance, which is the same condition, announced, or
-- the events a worker of a share consumer ceded: the row cede made goes once taken over);
-- the page handed out to the silent worker goes with it (its start frontier, so that receive
-- counts the crash, and the crashes counted so far; a lease keeps its end, its lane and its
-- place in the window).  Never a stream's row: a partition's or the urgent lane's stream is
-- taken over through _stream_pick, and the lane's stream of a share consumer hands its batch
-- out in leases (its batch is no worker's); otherwise a worker
-- of a share consumer gets a lease of the consumer's batch (_share_lease), and a worker of an
-- ordinary consumer a batch: the consumer's cursor moves past the new batch at once, and
-- the open batch holds its place for rotation until it is acknowledged.  Ticks are merged into
-- one batch up to batch_max_events events (counted by the ticks), but never across a tick that
-- a producer transaction of the queue was open across (see docs/how-to/priority.md).
-- The stream of a partition moves its own cursor like a consumer (its batches are streamed in
-- (txid, id) order, priority aside: per-key order); the consumer's cursor stays at or before the
-- slowest stream's (_stream_skip, _stream_pick), so that everything reading the consumer's
-- cursor (rotation, retention, lag) stays on the safe side.  The stream of the urgent lane (stream -1) moves its own cursor
-- too, ahead of the consumer's: only its urgent events are read there.
CREATE OR REPLACE FUNCTION pglogq._take_batch(q pglogq.queue, consumer_id integer, h pglogq.subscription,
                                               lease_size integer DEFAULT NULL)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
DECLARE
    c pglogq.subscription;
    d pglogq.subscription;
    prev pglogq.tick;
    cur_id bigint;
    first_id bigint;
    cur_total bigint;
    tk record;
    xips xid8[];
BEGIN
    IF h.parent_id IS NOT NULL AND h.stream IS NULL THEN
        -- a share consumer's row is only read here (KEY SHARE: it stays while we look), so that
        -- acquisitions of its workers do not wait for each other (_share_lease locks what it
        -- cuts from); an ordinary consumer's row is locked: one batch is taken at a time
        IF (SELECT s.share FROM pglogq.subscriber s WHERE s.sub_id = consumer_id) THEN
            SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = consumer_id FOR KEY SHARE;
        ELSE
            SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = consumer_id FOR NO KEY UPDATE;
        END IF;
        SELECT * INTO d FROM pglogq.subscription s
         WHERE s.parent_id = consumer_id AND s.stream IS NULL AND s.batch_id IS NOT NULL AND s.sub_id <> h.sub_id
           AND (s.heartbeat_at < clock_timestamp() - q.dead_interval OR s.released_at IS NOT NULL)
         ORDER BY s.batch_id LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE pglogq.attempt a SET sub_id = h.sub_id WHERE a.sub_id = d.sub_id;
            PERFORM pglogq._close_batch(d.sub_id);
            IF d.worker_name LIKE 'ceded.%' THEN
                -- the row cede made for the events it gave back: its work is done
                DELETE FROM pglogq.subscriber x WHERE x.sub_id = d.sub_id;
            ELSE
                RAISE NOTICE 'worker "%" took over batch % of silent worker "%" (last heartbeat %)',
                    h.worker_name, d.batch_id, d.worker_name, d.heartbeat_at;
            END IF;
            h.batch_id := nextval('pglogq.batch_seq');
            h.batch_prev_tick := d.batch_prev_tick;
            h.batch_cur_tick := d.batch_cur_tick;
            h.batch_big := d.batch_big;
            h.batch_started_at := clock_timestamp();
            h.page_prio := d.page_prio;
            h.page_txid := d.page_txid;
            h.page_id := d.page_id;
            h.page_end_prio := NULL;
            h.page_end_txid := NULL;
            h.page_end_id := NULL;
            h.page_more := NULL;
            h.page_marks := d.page_marks;
            h.started_prio := d.started_prio;
            h.started_txid := d.started_txid;
            h.started_id := d.started_id;
            h.suspect_prio := d.suspect_prio;
            h.suspect_txid := d.suspect_txid;
            h.suspect_id := d.suspect_id;
            h.lease_end_prio := d.lease_end_prio;
            h.lease_end_txid := d.lease_end_txid;
            h.lease_end_id := d.lease_end_id;
            h.lease_stream := d.lease_stream;
            h.lease_seq := d.lease_seq;
            RETURN h;
        END IF;
        IF c.share THEN
            RETURN pglogq._share_lease(q, consumer_id, h, coalesce(lease_size, 100));
        END IF;
    ELSE
        c := h;
    END IF;
    SELECT * INTO prev FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = c.last_tick;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tick % of consumer "%" is gone', c.last_tick, c.consumer_name
            USING ERRCODE = 'PQ017', HINT = 'seek the consumer to a tick that still exists';
    END IF;
    SELECT t.tick_id INTO cur_id FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id > c.last_tick
     ORDER BY t.tick_id LIMIT 1;
    IF cur_id IS NULL THEN
        RETURN h;
    END IF;
    first_id := cur_id;
    -- merge further ticks while the batch stays within batch_max_events (the ticks' event counts)
    SELECT max(t.tick_id) INTO cur_id FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id >= cur_id
       AND (t.tick_id = cur_id OR t.tick_event_total - prev.tick_event_total <= q.batch_max_events);
    -- ...but end the batch at a tick that a producer transaction of this queue was open across:
    -- its events commit after that tick with a lower txid than events before it, and the
    -- (priority, txid) order inside one batch would put them first.  Cutting there keeps
    -- commit order at tick granularity within a priority.
    IF cur_id > first_id THEN
        -- one index probe per merged tick (the event children often have no statistics yet,
        -- so a single correlated query may be planned as a scan of every event per tick)
        FOR tk IN SELECT x.tick_id, x.tick_snapshot FROM pglogq.tick x
                  WHERE x.queue_id = q.queue_id AND x.tick_id >= first_id AND x.tick_id < cur_id
                  ORDER BY x.tick_id LOOP
            xips := ARRAY(SELECT pg_snapshot_xip(tk.tick_snapshot));
            IF cardinality(xips) > 0 AND EXISTS (
                    SELECT 1 FROM pglogq.event e WHERE e.ev_queue = q.queue_id AND e.ev_txid = ANY (xips)) THEN
                cur_id := tk.tick_id;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    SELECT t.tick_event_total INTO cur_total FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = cur_id;
    IF h.parent_id IS NOT NULL AND h.stream IS NULL THEN
        UPDATE pglogq.sub_state s SET last_tick = cur_id, last_seen = clock_timestamp()
         WHERE s.sub_id = c.sub_id;
    ELSE
        -- a partition's stream leaves the consumer's cursor alone: _stream_skip (once per new
        -- tick) and _stream_pick (when nothing is left to hand out) put it on the slowest
        -- stream of the due set, so that a batch costs nothing per partition
        h.last_tick := cur_id;
    END IF;
    h.batch_id := nextval('pglogq.batch_seq');
    h.batch_prev_tick := prev.tick_id;
    h.batch_cur_tick := cur_id;
    h.batch_big := coalesce(h.stream >= 0, false)
                   OR ((h.stream IS NULL OR h.stream <= -2) AND cur_total - prev.tick_event_total > q.big_batch_events);
    h.batch_started_at := clock_timestamp();
    h.page_prio := NULL;
    h.page_txid := NULL;
    h.page_id := NULL;
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
    RETURN h;
END $$;
