-- pglogq._stream_pick(q, consumer_id, worker, tried): the partition stream a worker of a
-- partitioned queue reads next (the one owner of "one worker per partition at a time").
-- Parameters: q  the queue (partitions > 1); consumer_id  the consumer's sub_id; worker  the
--             worker's name ('' for the consumer called without one); tried  streams already
--             found empty in this call
-- Returns:    the stream's row, locked FOR NO KEY UPDATE, or a row of NULLs when no stream can
--             be read now.  A stream taken over from a silent worker comes with a new batch id
--             (not written yet: receive writes it), so that the silent worker's ack is refused.
-- Raises:     nothing.
-- Tables:     subscription (lock), sub_state (a partition's stream: out of the due set, when the
--             caller found it empty up to the tick that put it there; due_order and out_worker
--             of the stream chosen; the consumer's cursor put back on its slowest stream when no
--             stream can be read), tick (read), progress (a silent worker's rows deleted),
--             batch_seq.
-- Order of choice: first the page this worker was handed and has not acknowledged (it gets the
-- same page again, as receive always does); then a stream with no page out -- or whose page's
-- worker fell silent for longer than the queue's dead_interval (or was released by maintenance)
-- -- that is not held back by a nack (hold_until) and has something to read (an open batch or a
-- tick after its cursor), the one served longest ago first.  A stream being read by a live
-- worker is never handed to another: the events of one key are never in flight twice.  Rows
-- locked by other receives are skipped (SKIP LOCKED), so workers never wait for each other here.
-- On a partitioned queue only the streams of the consumer's due set (_stream_skip) are looked
-- at, in the order of its index (due_order, the time a worker was last given the stream): the
-- cost of a call is the streams it passes (pages out to live workers, holds, streams found empty
-- and taken out of the set), never the partition count.  The consumer's row is never waited
-- for here (a stream is held): _stream_skip holds the consumer's row while it waits for streams.
CREATE OR REPLACE FUNCTION pglogq._stream_pick(q pglogq.queue, consumer_id integer, worker text, tried smallint[])
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
    h pglogq.subscription;
    newest bigint;
    cand record;
    tried_ids integer[];
BEGIN
    IF q.partitions > 1 THEN
        -- a stream the caller found empty (the last one tried, still locked by this call) leaves
        -- the set when it has read up to the tick that put it there; a tick taken in since then
        -- left due_tick ahead of its cursor, and it stays
        IF cardinality(tried) > 0 THEN
            UPDATE pglogq.sub_state s SET due_of = NULL, out_worker = NULL
             WHERE s.sub_id = (SELECT x.sub_id FROM pglogq.subscriber x
                                WHERE x.parent_id = consumer_id AND x.stream = tried[cardinality(tried)])
               AND s.due_of IS NOT NULL AND s.batch_id IS NULL AND s.page_end_txid IS NULL
               AND s.hold_until IS NULL AND s.due_tick <= s.last_tick;
            tried_ids := ARRAY(SELECT x.sub_id FROM pglogq.subscriber x
                                WHERE x.parent_id = consumer_id AND x.stream = ANY (tried));
        ELSE
            tried_ids := '{}';
        END IF;
        -- the page this worker holds: its mark first wiped from the streams whose page was
        -- acknowledged or taken over since (each such mark is wiped once)
        UPDATE pglogq.sub_state s SET out_worker = NULL
         WHERE s.sub_id = ANY (ARRAY(SELECT o.sub_id FROM pglogq.sub_state o
                                      WHERE o.due_of = consumer_id AND o.out_worker = worker
                                        AND (o.page_end_txid IS NULL OR o.lease_worker IS DISTINCT FROM worker)
                                        FOR NO KEY UPDATE SKIP LOCKED));
        SELECT * INTO h FROM pglogq.subscription s
         WHERE s.sub_id = ANY (ARRAY(SELECT o.sub_id FROM pglogq.sub_state o
                                      WHERE o.due_of = consumer_id AND o.out_worker = worker))
           AND s.lease_worker = worker AND s.page_end_txid IS NOT NULL AND NOT (s.sub_id = ANY (tried_ids))
         ORDER BY s.stream LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            RETURN h;
        END IF;
        SELECT max(t.tick_id) INTO newest FROM pglogq.tick t WHERE t.queue_id = q.queue_id;
        LOOP
            SELECT o.sub_id, o.batch_id, o.last_tick, o.due_tick INTO cand FROM pglogq.sub_state o
             WHERE o.due_of = consumer_id AND NOT (o.sub_id = ANY (tried_ids))
               AND (o.page_end_txid IS NULL OR o.released_at IS NOT NULL
                    OR o.heartbeat_at < clock_timestamp() - q.dead_interval)
               AND (o.hold_until IS NULL OR o.hold_until <= clock_timestamp())
             ORDER BY o.due_order NULLS FIRST, o.sub_id
             LIMIT 1
               FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                -- nothing to hand out: the consumer's cursor back on its slowest stream of the
                -- set (behind after streams moved in concurrent transactions), unless another
                -- call holds the consumer's row (that one moves it)
                PERFORM 1 FROM pglogq.sub_state s WHERE s.sub_id = consumer_id FOR NO KEY UPDATE SKIP LOCKED;
                IF FOUND THEN
                    UPDATE pglogq.sub_state s
                       SET last_tick = least(s.due_tick, (SELECT min(o.last_tick) FROM pglogq.sub_state o
                                                           WHERE o.due_of = consumer_id))
                     WHERE s.sub_id = consumer_id AND s.due_tick IS NOT NULL
                       AND s.last_tick < least(s.due_tick, (SELECT min(o.last_tick) FROM pglogq.sub_state o
                                                             WHERE o.due_of = consumer_id));
                END IF;
                RETURN NULL;
            END IF;
            IF cand.batch_id IS NULL AND cand.last_tick >= newest AND cand.due_tick <= cand.last_tick THEN
                -- read up to the newest tick already (its last page acknowledged): out of the set
                UPDATE pglogq.sub_state s SET due_of = NULL, out_worker = NULL WHERE s.sub_id = cand.sub_id;
                CONTINUE;
            END IF;
            SELECT * INTO h FROM pglogq.subscription s WHERE s.sub_id = cand.sub_id FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                tried_ids := tried_ids || cand.sub_id;  -- its identity row locked: the next one
                CONTINUE;
            END IF;
            UPDATE pglogq.sub_state s SET due_order = clock_timestamp(), out_worker = worker
             WHERE s.sub_id = h.sub_id;
            IF h.page_end_txid IS NOT NULL AND h.lease_worker IS DISTINCT FROM worker THEN
                RAISE NOTICE 'worker "%" took over partition % of consumer "%" from silent worker "%" (last heartbeat %)',
                    worker, h.stream, h.consumer_name, h.lease_worker, h.heartbeat_at;
                DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id;
                h.batch_id := nextval('pglogq.batch_seq');
            END IF;
            RETURN h;
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
    IF h.page_end_txid IS NOT NULL AND h.lease_worker IS DISTINCT FROM worker THEN
        RAISE NOTICE 'worker "%" took over partition % of consumer "%" from silent worker "%" (last heartbeat %)',
            worker, h.stream, h.consumer_name, h.lease_worker, h.heartbeat_at;
        DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id;
        h.batch_id := nextval('pglogq.batch_seq');
    END IF;
    RETURN h;
END $$;
