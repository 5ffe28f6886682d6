-- pglogq._close_batch(holder, seen): close the open batch of one holder (the one owner of that rule).
-- Parameters: holder  the sub_id of the consumer or cooperating worker holding the batch, locked
--             by the caller; seen  also record the holder as seen now (heartbeat_at, last_seen):
--             true when the holder itself closes it (ack, receive), false when another party
--             does (takeover, seek, retention)
-- Returns:    the id of the batch closed, NULL when the holder had none open.
-- Tables:     sub_state (update of the holder's row), progress, attempt (its rows deleted).
-- Clears the batch and its page state; the consumer's cursor already stands past the batch (it
-- moved when the batch was taken), so what was not acknowledged is dropped for this consumer
-- unless the caller moves the cursor back (seek).  Every path that ends a batch goes through
-- here: ack of its last page, receive finding nothing left in it, takeover of a silent worker's
-- batch, seek with force, and the retention limit.
CREATE OR REPLACE FUNCTION pglogq._close_batch(holder integer, seen boolean DEFAULT false)
RETURNS bigint LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    closed bigint;
BEGIN
    SELECT s.batch_id INTO closed FROM pglogq.subscription s WHERE s.sub_id = holder;
    IF closed IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE pglogq.sub_state s
       SET batch_id = NULL, batch_prev_tick = NULL, batch_cur_tick = NULL, batch_big = NULL,
           batch_started_at = NULL, page_prio = NULL, page_txid = NULL, page_id = NULL,
           page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL,
           page_marks = NULL, started_prio = NULL, started_txid = NULL, started_id = NULL,
           suspect_prio = NULL, suspect_txid = NULL, suspect_id = NULL, released_at = NULL,
           hold_txid = NULL, hold_id = NULL, hold_until = NULL,
           lease_end_prio = NULL, lease_end_txid = NULL, lease_end_id = NULL, lease_stream = NULL, lease_seq = NULL,
           heartbeat_at = CASE WHEN seen THEN clock_timestamp() ELSE s.heartbeat_at END,
           last_seen = CASE WHEN seen THEN clock_timestamp() ELSE s.last_seen END
     WHERE s.sub_id = holder;
    DELETE FROM pglogq.progress p WHERE p.sub_id = holder;
    DELETE FROM pglogq.attempt a WHERE a.sub_id = holder;
    RETURN closed;
END $$;
