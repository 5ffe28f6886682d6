-- pglogq.heartbeat(batch_id): a worker says it is still handling its batch.
-- Parameters: batch_id  from receive
-- Returns:    true; false when the batch is no longer its holder's (acknowledged already, or taken
--             over by another worker after this one fell silent for the queue's dead_interval):
--             the caller must stop handling the batch and drop it without acknowledging.
-- Raises:     PQ008 unknown batch id (NULL, below 1, or never issued).
-- Tables:     sub_state (update of the holder's heartbeat_at; HOT, fillfactor 50; its dead versions go
--             with the rotation of the state, maint_rotate_meta).
-- Call it well within dead_interval (the consumer runtime does it every heartbeat_interval while
-- handlers run).  A heartbeat that waits behind an ack of the same batch sees the ack's result.
CREATE OR REPLACE FUNCTION pglogq.heartbeat(batch_id bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
BEGIN
    h := pglogq._holder(batch_id, false);
    IF h.sub_id IS NULL THEN
        RETURN false;
    END IF;
    UPDATE pglogq.sub_state s
       SET heartbeat_at = clock_timestamp(), last_seen = clock_timestamp(), released_at = NULL
     WHERE s.sub_id = h.sub_id;
    RETURN true;
END $$;
