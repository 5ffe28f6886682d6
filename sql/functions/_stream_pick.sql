-- pglogq._stream_pick(q, consumer_id, worker, tried): the partition stream a worker of a
-- partitioned queue reads next (the one owner of "one worker per partition at a time").
-- Parameters: q  the queue (partitions > 1); consumer_id  the consumer's sub_id; worker  the
--             worker's name ('' for the consumer called without one); tried  streams already
--             found empty in this call
-- Returns:    the stream's row, locked FOR NO KEY UPDATE, or a row of NULLs when no stream can
--             be read now.  A stream taken over from a silent worker comes with a new batch id
--             (not written yet: receive writes it), so that the silent worker's ack is refused.
-- Raises:     nothing.
-- Tables:     subscription (lock), stream_mark (a partition's stream: its marks deleted up to
--             the tick the caller read it through when it was found empty; those of the stream
--             chosen made one, at the back of the order), sub_state (out_of, out_worker and the
--             cursor of the stream chosen; the consumer's cursor put back on its slowest marked
--             stream when none can be read), tick (read); a silent worker's stream taken over by
--             _stream_takeover.
-- Order of choice: first the page this worker was handed and has not acknowledged (it gets the
-- same page again, as receive always does); then a stream with no page out -- or whose page's
-- worker fell silent for longer than the queue's dead_interval (or was released by maintenance)
-- -- that is not held back by a nack (hold_until) and has something to read (an open batch or a
-- tick after its cursor), the one served longest ago first.  A stream being read by a live
-- worker is never handed to another: the events of one key are never in flight twice.  Rows
-- locked by other receives are skipped (SKIP LOCKED), so workers never wait for each other here.
-- On a partitioned queue only the marked streams (pglogq.stream_mark, made by _stream_skip) are
-- looked at, in the order of the marks (a stream given to a worker goes to the back: the one
-- served longest ago first): the cost of a call is the streams it passes (pages out to live
-- workers, holds, streams found empty and unmarked), never the partition count.  Nothing here
-- waits: stream rows are taken with SKIP LOCKED, the consumer's row too, and marks are only ever
-- deleted by the holder of their stream's row (others only insert them).
CREATE OR REPLACE FUNCTION pglogq._stream_pick(q pglogq.queue, consumer_id integer, worker text, tried smallint[])
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
DECLARE
    h pglogq.subscription;
    newest bigint;
    cand smallint;
    passed smallint[];
    mark_tick bigint;
    mark_since bigint;
    slowest bigint;
    ep integer;
BEGIN
    IF q.partitions > 1 THEN
        -- a stream the caller found empty (the last one tried, still locked by this call): its
        -- marks up to the tick it read through go; a mark of a later tick (taken in since) stays
        IF cardinality(tried) > 0 THEN
            DELETE FROM pglogq.stream_mark m
             WHERE m.consumer_id = _stream_pick.consumer_id AND m.stream = tried[cardinality(tried)]
               AND m.tick_id <= (SELECT st.last_tick FROM pglogq.subscriber x
                                   JOIN pglogq.sub_state st ON st.sub_id = x.sub_id
                                  WHERE x.parent_id = _stream_pick.consumer_id AND x.stream = tried[cardinality(tried)]
                                    AND st.batch_id IS NULL);
        END IF;
        -- the page this worker holds: its mark first wiped from the streams whose page was
        -- acknowledged or taken over since (each such mark is wiped once)
        UPDATE pglogq.sub_state s SET out_of = NULL, out_worker = NULL
         WHERE s.sub_id = ANY (ARRAY(SELECT o.sub_id FROM pglogq.sub_state o
                                      WHERE o.out_of = consumer_id AND o.out_worker = worker
                                        AND (o.page_end_txid IS NULL OR o.lease_worker IS DISTINCT FROM worker)
                                        FOR NO KEY UPDATE SKIP LOCKED));
        SELECT * INTO h FROM pglogq.subscription s
         WHERE s.sub_id = ANY (ARRAY(SELECT o.sub_id FROM pglogq.sub_state o
                                      WHERE o.out_of = consumer_id AND o.out_worker = worker))
           AND s.lease_worker = worker AND s.page_end_txid IS NOT NULL AND NOT (s.stream = ANY (tried))
         ORDER BY s.stream LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            RETURN h;
        END IF;
        SELECT max(t.tick_id) INTO newest FROM pglogq.tick t WHERE t.queue_id = q.queue_id;
        SELECT s.mark_epoch INTO ep FROM pglogq.sub_state s WHERE s.sub_id = consumer_id;
        passed := tried;
        LOOP
            -- the marked stream served longest ago (the order of the marks), not passed yet
            SELECT m.stream INTO cand FROM pglogq.stream_mark m
             WHERE m.consumer_id = _stream_pick.consumer_id AND m.epoch = ep AND NOT (m.stream = ANY (passed))
             ORDER BY m.seq LIMIT 1;
            IF NOT FOUND THEN
                -- nothing to hand out: the consumer's cursor back on its slowest marked stream
                -- (behind after streams moved in concurrent transactions), unless another call
                -- holds the consumer's row (that one moves it)
                PERFORM 1 FROM pglogq.sub_state s WHERE s.sub_id = consumer_id FOR NO KEY UPDATE SKIP LOCKED;
                IF FOUND THEN
                    slowest := least((SELECT s.due_tick FROM pglogq.sub_state s WHERE s.sub_id = consumer_id),
                                     (SELECT min(st.last_tick) FROM pglogq.subscriber x
                                        JOIN pglogq.sub_state st ON st.sub_id = x.sub_id
                                       WHERE x.parent_id = consumer_id
                                         AND x.stream IN (SELECT m.stream FROM pglogq.stream_mark m
                                                           WHERE m.consumer_id = _stream_pick.consumer_id
                                                             AND m.epoch = ep)));
                    UPDATE pglogq.sub_state s SET last_tick = slowest
                     WHERE s.sub_id = consumer_id AND s.last_tick < slowest;
                END IF;
                RETURN NULL;
            END IF;
            passed := passed || cand;
            SELECT * INTO h FROM pglogq.subscription s
             WHERE s.parent_id = consumer_id AND s.stream = cand
               AND (s.page_end_txid IS NULL OR s.released_at IS NOT NULL
                    OR s.heartbeat_at < clock_timestamp() - q.dead_interval)
               AND (s.hold_until IS NULL OR s.hold_until <= clock_timestamp())
               FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                CONTINUE;  -- a live worker's page, a hold, or another receive's: the next one
            END IF;
            -- its marks made one, at the back of the order; the cursor of a stream without a
            -- batch brought to what its marks say it had nothing unread up to
            SELECT max(m.tick_id), min(m.since_tick) INTO mark_tick, mark_since FROM pglogq.stream_mark m
             WHERE m.consumer_id = _stream_pick.consumer_id AND m.stream = cand AND m.epoch = ep;
            IF mark_tick IS NULL THEN
                CONTINUE;  -- unmarked by its holder after it was read above: nothing to read
            END IF;
            IF h.batch_id IS NULL AND h.last_tick >= newest AND mark_tick <= h.last_tick THEN
                -- read up to the newest tick already (its last page acknowledged): unmarked
                DELETE FROM pglogq.stream_mark m
                 WHERE m.consumer_id = _stream_pick.consumer_id AND m.stream = cand AND m.tick_id <= h.last_tick;
                CONTINUE;
            END IF;
            DELETE FROM pglogq.stream_mark m
             WHERE m.consumer_id = _stream_pick.consumer_id AND m.stream = cand
               AND (m.tick_id <= mark_tick OR m.epoch <> ep);
            IF h.batch_id IS NULL AND mark_since > h.last_tick THEN
                h.last_tick := mark_since;
                mark_since := h.last_tick;
            ELSE
                mark_since := NULL;
            END IF;
            INSERT INTO pglogq.stream_mark (consumer_id, stream, tick_id, since_tick, epoch)
            VALUES (consumer_id, cand, mark_tick, h.last_tick, ep);
            UPDATE pglogq.sub_state s SET out_of = consumer_id, out_worker = worker,
                                          last_tick = coalesce(mark_since, s.last_tick)
             WHERE s.sub_id = h.sub_id;
            RETURN pglogq._stream_takeover(h, worker);
        END LOOP;
    END IF;
    SELECT * INTO h FROM pglogq.subscription s
     WHERE s.parent_id = consumer_id AND s.stream IS NOT NULL AND s.lease_worker = worker
       AND s.page_end_txid IS NOT NULL AND NOT (s.stream = ANY (tried))
     ORDER BY s.stream LIMIT 1
       FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN h;
    END IF;
    SELECT max(t.tick_id) INTO newest FROM pglogq.tick t WHERE t.queue_id = q.queue_id;
    SELECT * INTO h FROM pglogq.subscription s
     WHERE s.parent_id = consumer_id AND s.stream IS NOT NULL AND NOT (s.stream = ANY (tried))
       AND (s.page_end_txid IS NULL OR s.released_at IS NOT NULL
            OR s.heartbeat_at < clock_timestamp() - q.dead_interval)
       AND (s.hold_until IS NULL OR s.hold_until <= clock_timestamp())
       AND (s.batch_id IS NOT NULL OR s.last_tick < newest)
     ORDER BY s.last_seen NULLS FIRST, s.stream
     LIMIT 1
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN pglogq._stream_takeover(h, worker);
END $$;
