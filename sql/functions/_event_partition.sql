-- pglogq._event_partition(partitions, key, msg_id): the partition an event goes to (the one owner
-- of that rule).
-- Parameters: partitions  the queue's partition count; key  the event's key (NULL: none);
--             msg_id  the event's id
-- Returns:    NULL on a queue of one partition; else key_slot(key) % partitions for a keyed
--             event, msg_id % partitions for one without a key (consecutive sends spread over
--             every partition in turn).
-- Raises:     nothing.
-- Tables:     none.
-- Called per event only where a queue has partitions or an event a key (the other sends never
-- call it); about 2 microseconds a call.
CREATE OR REPLACE FUNCTION pglogq._event_partition(partitions integer, key text, msg_id bigint)
RETURNS smallint LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF partitions > 1 THEN
        RETURN (coalesce(pglogq.key_slot(key)::bigint, msg_id) % partitions)::smallint;
    END IF;
    RETURN NULL;
END $$;
