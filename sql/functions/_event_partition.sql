-- pglogq._event_partition(partitions, key, msg_id): the partition an event goes to (the one owner
-- of that rule).
-- Parameters: partitions  the queue's partition count; key  the event's key (NULL: none);
--             msg_id  the event's id
-- Returns:    NULL on a queue of one partition; else key_slot(key) % partitions for a keyed
--             event, msg_id % partitions for one without a key (consecutive sends spread over
--             every partition in turn).
-- Raises:     nothing.
-- Tables:     none.
-- No SET clause: inlined into the INSERTs of the sends (see key_slot).
CREATE OR REPLACE FUNCTION pglogq._event_partition(partitions integer, key text, msg_id bigint)
RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN partitions > 1
                THEN (COALESCE(pglogq.key_slot(key)::pg_catalog.int8, msg_id)
                      OPERATOR(pg_catalog.%) partitions)::pg_catalog.int2 END;
$$;
