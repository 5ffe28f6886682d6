-- pglogq._queue(queue_name): the queue row, or an error.
-- Parameters: queue_name  the queue's name
-- Returns:    pglogq.queue row.
-- Raises:     PQ001 unknown queue (with the closest existing name as a hint), also when a
--             drop_queue of it committed while this call waited; 40001 in REPEATABLE READ or
--             SERIALIZABLE when the queue was dropped after the transaction's snapshot.
-- Tables:     queue (read; FOR KEY SHARE outside READ COMMITTED).
-- Locks: a shared transaction advisory lock on the queue's name, which drop_queue takes
-- exclusively first: a call racing a drop waits for it and then reads the queue afresh, so it
-- gets PQ001 instead of a dropped table or sequence (XX000).  The lock is held until the end of
-- the caller's transaction (a drop_queue waits for it).
CREATE OR REPLACE FUNCTION pglogq._queue(queue_name text)
RETURNS pglogq.queue LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    near text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(_queue.queue_name));
    SELECT * INTO q FROM pglogq.queue WHERE queue.queue_name = _queue.queue_name;
    IF NOT FOUND THEN
        SELECT x.queue_name INTO near FROM pglogq.queue x
         WHERE lower(x.queue_name) = lower(_queue.queue_name)
            OR x.queue_name LIKE left(_queue.queue_name, 3) || '%'
         ORDER BY x.queue_name LIMIT 1;
        RAISE EXCEPTION 'unknown queue "%"', left(queue_name, 80)
            USING ERRCODE = 'PQ001',
                  HINT = CASE WHEN near IS NOT NULL THEN format('did you mean "%s"?', near)
                              ELSE 'pglogq.queue_info() lists the queues' END;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- the transaction's snapshot may still show a queue dropped since: this lock says so (40001)
        PERFORM 1 FROM pglogq.queue x WHERE x.queue_id = q.queue_id FOR KEY SHARE;
    END IF;
    RETURN q;
END $$;
