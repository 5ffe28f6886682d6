-- pglogq._share_lease(q, consumer_id, h, lease_size): give worker row h of a share consumer a
-- lease: the next events of the consumer's batch that no worker has been given yet.
-- Parameters: q  the queue row; consumer_id  the share consumer's sub_id; h  the worker's row
--             (locked by the caller, no batch open); lease_size  events at most (1..100000)
-- Returns:    h with its batch fields set to the lease (not yet written): the consumer's batch
--             (its ticks, big flag), its page start at the hand-out frontier, lease_end_* at the
--             key of the lease's last event; h unchanged when nothing is left up to the last tick.
-- Tables:     subscription (lock of the consumer row), sub_state (update of the consumer row:
--             the batch it hands out and the frontier), tick (read), event and cancelled (read,
--             through _batch_page), batch_seq (the lease's batch id).
-- The consumer row holds the batch being handed out, as a holder holds an open batch (so
-- rotation, retention, seek and lag treat it as one), and its page key is the hand-out
-- frontier: every event of the batch up to it is in some lease.  The consumer's cursor moves
-- past the batch when it is opened (as for cooperating workers), and the batch is closed as soon
-- as its last event is leased; each lease then holds its own place until acknowledged.  The
-- events are read once more by the worker's receive, bounded by its lease end.
-- Concurrency: acquisitions of one consumer serialise on the consumer row (held to the end of the
-- caller's transaction: receive's), after the worker's own row (the order every caller takes).
CREATE OR REPLACE FUNCTION pglogq._share_lease(q pglogq.queue, consumer_id integer, h pglogq.subscription,
                                               lease_size integer)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET jit = off AS $$
DECLARE
    c pglogq.subscription;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    rows pglogq.message[];
    n integer;
    last_row pglogq.message;
BEGIN
    SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = consumer_id FOR NO KEY UPDATE;
    LOOP
        IF c.batch_id IS NULL THEN
            c := pglogq._take_batch(q, consumer_id, c);
            IF c.batch_id IS NULL THEN
                RETURN h;  -- nothing new up to the last tick
            END IF;
            UPDATE pglogq.sub_state s
               SET last_tick = c.last_tick, batch_id = c.batch_id, batch_prev_tick = c.batch_prev_tick,
                   batch_cur_tick = c.batch_cur_tick, batch_big = c.batch_big, batch_started_at = c.batch_started_at,
                   page_prio = NULL, page_txid = NULL, page_id = NULL, last_seen = clock_timestamp()
             WHERE s.sub_id = consumer_id;
        END IF;
        SELECT p.tick_snapshot, t.tick_snapshot INTO prev_snap, cur_snap
          FROM pglogq.tick p, pglogq.tick t
         WHERE p.queue_id = q.queue_id AND p.tick_id = c.batch_prev_tick
           AND t.queue_id = q.queue_id AND t.tick_id = c.batch_cur_tick;
        IF prev_snap IS NULL OR cur_snap IS NULL THEN
            RAISE EXCEPTION 'tick % or % of the batch of share consumer "%" is gone',
                c.batch_prev_tick, c.batch_cur_tick, c.consumer_name
                USING ERRCODE = 'PQ017', HINT = 'seek the consumer (force => true) to a tick that still exists';
        END IF;
        rows := ARRAY(SELECT m FROM pglogq._batch_page(q.queue_id, consumer_id, prev_snap, cur_snap, c.batch_big,
                                                        c.page_prio, c.page_txid, c.page_id, lease_size + 1) m);
        n := cardinality(rows);
        IF n > 0 THEN
            EXIT;
        END IF;
        -- nothing left to hand out in this batch: close it, then the next one
        PERFORM pglogq._close_batch(consumer_id);
        c.batch_id := NULL;
        c.page_prio := NULL;
        c.page_txid := NULL;
        c.page_id := NULL;
    END LOOP;
    last_row := rows[least(n, lease_size)];
    h.batch_id := nextval('pglogq.batch_seq');
    h.batch_prev_tick := c.batch_prev_tick;
    h.batch_cur_tick := c.batch_cur_tick;
    h.batch_big := c.batch_big;
    h.batch_started_at := clock_timestamp();
    h.page_prio := c.page_prio;
    h.page_txid := c.page_txid;
    h.page_id := c.page_id;
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
    IF n > lease_size THEN
        UPDATE pglogq.sub_state s
           SET page_prio = last_row.priority, page_txid = last_row.txid, page_id = last_row.msg_id,
               last_seen = clock_timestamp()
         WHERE s.sub_id = consumer_id;
    ELSE
        -- the lease takes the rest of the batch
        PERFORM pglogq._close_batch(consumer_id);
    END IF;
    RETURN h;
END $$;
