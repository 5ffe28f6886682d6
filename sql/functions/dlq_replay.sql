-- pglogq.dlq_replay(dead_id): send one dead letter back to the consumer that dead-lettered it.
-- Parameters: dead_id  from dlq_inspect
-- Returns:    the event's msg_id (unchanged).  It is appended to the queue's current table for
--             that consumer only (other consumers handled it already), with retry_count 0, so
--             it gets the queue's max_retries again; it arrives in the consumer's next batch.
-- Raises:     PQ012 unknown dead letter (never existed, purged, or already replayed).
-- Tables:     dead_letter (delete), event (insert), queue (read).
-- Concurrent replays of one dead letter replay it once (pglogq._replay): the loser finds it gone
-- and gets PQ012.
CREATE OR REPLACE FUNCTION pglogq.dlq_replay(dead_id bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    mid bigint;
BEGIN
    SELECT r.msg_id INTO mid FROM pglogq._replay(ARRAY[dlq_replay.dead_id]) r(msg_id);
    IF mid IS NULL THEN
        RAISE EXCEPTION 'unknown dead letter %', coalesce(dead_id::text, 'NULL')
            USING ERRCODE = 'PQ012', HINT = 'it may have been replayed or purged already';
    END IF;
    RETURN mid;
END $$;
