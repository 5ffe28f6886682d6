-- pglogq._consumer(queue_id, queue_name, consumer_name): the consumer's subscription row.
-- Parameters: queue_id, queue_name (for the message), consumer_name
-- Returns:    pglogq.subscription row of the consumer (parent_id IS NULL).
-- Raises:     PQ002 unknown consumer (hint: a near name of the queue's consumers, else where they
--             are listed), also when an unsubscribe of it committed while this call waited.
-- Tables:     subscription (read).
-- Locks: a shared transaction advisory lock on (queue, consumer name), which unsubscribe takes
-- exclusively first: a call racing an unsubscribe waits for it and then reads afresh.
CREATE OR REPLACE FUNCTION pglogq._consumer(queue_id integer, queue_name text, consumer_name text)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    s pglogq.subscription;
    near text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.consumer.' || _consumer.queue_id),
                                         hashtext(_consumer.consumer_name));
    SELECT * INTO s FROM pglogq.subscription x
     WHERE x.queue_id = _consumer.queue_id AND x.consumer_name = _consumer.consumer_name
       AND x.parent_id IS NULL;
    IF NOT FOUND THEN
        -- a near name of the same queue (the same test as pglogq._queue's), else where to look
        SELECT x.consumer_name INTO near FROM pglogq.subscription x
         WHERE x.queue_id = _consumer.queue_id AND x.parent_id IS NULL
           AND (lower(x.consumer_name) = lower(_consumer.consumer_name)
                OR x.consumer_name LIKE left(_consumer.consumer_name, 3) || '%')
         ORDER BY x.consumer_name LIMIT 1;
        RAISE EXCEPTION 'unknown consumer "%" on queue "%"', left(consumer_name, 80), queue_name
            USING ERRCODE = 'PQ002',
                  HINT = CASE WHEN near IS NOT NULL THEN format('did you mean "%s"?', near)
                              ELSE 'pglogq.consumer_info(queue) lists its consumers' END;
    END IF;
    RETURN s;
END $$;
