-- pglogq._share_advance(src, consumer_id, k, more, last_prio, last_txid, last_id): a lease of k
-- events was cut from the batch that row src hands out: move that batch's hand-out frontier to
-- the lease's last event, or close the batch when the lease took the rest of it.
-- Parameters: src  the row the lease was cut from (the consumer's own, or a lane's stream),
--             locked by the caller; consumer_id  the share consumer's sub_id; k  the lease's
--             events; more  whether the batch has events after the lease; last_prio,
--             last_txid, last_id  the key of the lease's last event
-- Returns:    nothing.
-- Raises:     nothing.
-- Tables:     sub_state (update of src's row: the frontier, and on the consumer's own row its
--             hand-out count), progress and attempt (through _close_batch).
-- The one owner of that step: _share_lease takes it after its read of the lease, receive after
-- its short way's read (the page it returns is the lease).
CREATE OR REPLACE FUNCTION pglogq._share_advance(src integer, consumer_id integer, k integer, more boolean,
                                                 last_prio integer, last_txid xid8, last_id bigint)
RETURNS void LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF more THEN
        -- the frontier moves (and, on the consumer's own row, the count with it: one update)
        UPDATE pglogq.sub_state s
           SET page_prio = last_prio, page_txid = last_txid, page_id = last_id,
               last_seen = clock_timestamp(),
               share_handed = CASE WHEN s.sub_id = consumer_id THEN coalesce(s.share_handed, 0) + k
                                   ELSE s.share_handed END
         WHERE s.sub_id = src;
    ELSE
        PERFORM pglogq._close_batch(src);
    END IF;
END $$;
