-- pglogq.dlq_replay(dead_id): send one dead letter back to the consumer that dead-lettered it.
-- Parameters: dead_id  from dlq_inspect
-- Returns:    the event's msg_id (unchanged).  It is appended to the queue's current table for
--             that consumer only (other consumers handled it already), with retry_count 0, so
--             it gets the queue's max_retries again; it arrives in the consumer's next batch.
-- Raises:     PQ012 unknown dead letter (never existed, purged, or already replayed).
-- Tables:     dead_letter (delete), event (insert), queue (read).
-- Concurrent replays of one dead letter replay it once: the DELETE locks the row, the loser
-- finds it gone and gets PQ012.
CREATE OR REPLACE FUNCTION pglogq.dlq_replay(dead_id bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    mid bigint;
BEGIN
    WITH d AS (
        DELETE FROM pglogq.dead_letter x WHERE x.dead_id = dlq_replay.dead_id RETURNING x.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers,
                              ev_priority, ev_retry, ev_owner)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers,
           d.ev_priority, 0, d.sub_id
      FROM d JOIN pglogq.queue q ON q.queue_id = d.queue_id
    RETURNING ev_id INTO mid;
    IF mid IS NULL THEN
        RAISE EXCEPTION 'unknown dead letter %', coalesce(dead_id::text, 'NULL')
            USING ERRCODE = 'PQ012', HINT = 'it may have been replayed or purged already';
    END IF;
    RETURN mid;
END $$;
