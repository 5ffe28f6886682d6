-- pglogq._stream_pick(q, consumer_id, worker, tried): the partition stream a worker of a
-- partitioned queue reads next (the one owner of "one worker per partition at a time").
-- Parameters: q  the queue (partitions > 1); consumer_id  the consumer's sub_id; worker  the
--             worker's name ('' for the consumer called without one); tried  streams already
--             found empty in this call
-- Returns:    the stream's row, locked FOR NO KEY UPDATE, or a row of NULLs when no stream can
--             be read now.  A stream taken over from a silent worker comes with a new batch id
--             (not written yet: receive writes it), so that the silent worker's ack is refused.
-- Raises:     nothing.
-- Tables:     subscription (lock), tick (read), progress (a silent worker's rows deleted),
--             batch_seq.
-- Order of choice: first the page this worker was handed and has not acknowledged (it gets the
-- same page again, as receive always does); then a stream with no page out -- or whose page's
-- worker fell silent for longer than the queue's dead_interval (or was released by maintenance)
-- -- that is not held back by a nack (hold_until) and has something to read (an open batch or a
-- tick after its cursor), the one served longest ago first.  A stream being read by a live
-- worker is never handed to another: the events of one key are never in flight twice.  Rows
-- locked by other receives are skipped (SKIP LOCKED), so workers never wait for each other here.
CREATE OR REPLACE FUNCTION pglogq._stream_pick(q pglogq.queue, consumer_id integer, worker text, tried smallint[])
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
    newest bigint;
BEGIN
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
