-- pglogq._consumer(queue_id, queue_name, consumer_name): the consumer's subscription row.
-- Parameters: queue_id, queue_name (for the message), consumer_name
-- Returns:    pglogq.subscription row of the consumer (parent_id IS NULL).
-- Raises:     PQ002 unknown consumer, also when an unsubscribe of it committed while this call
--             waited.
-- Tables:     subscription (read).
-- Locks: a shared transaction advisory lock on (queue, consumer name), which unsubscribe takes
-- exclusively first: a call racing an unsubscribe waits for it and then reads afresh.
CREATE OR REPLACE FUNCTION pglogq._consumer(queue_id integer, queue_name text, consumer_name text)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    s pglogq.subscription;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.consumer.' || _consumer.queue_id),
                                         hashtext(_consumer.consumer_name));
    SELECT * INTO s FROM pglogq.subscription x
     WHERE x.queue_id = _consumer.queue_id AND x.consumer_name = _consumer.consumer_name
       AND x.parent_id IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer "%" on queue "%"', left(consumer_name, 80), queue_name
            USING ERRCODE = 'PQ002';
    END IF;
    RETURN s;
END $$;
