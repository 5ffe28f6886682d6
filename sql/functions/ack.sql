-- pglogq.ack(batch_id, last_msg_id, last_txid): acknowledge the page that receive returned last.
-- Parameters: batch_id  from receive
--             last_msg_id, last_txid  the msg_id and txid of the last message of the page being
--             acknowledged (optional; clients pass them): the ack is refused when the current
--             page ends elsewhere, i.e. when another process using the same consumer (or worker)
--             name acknowledged that page and received the next one meanwhile.  Without them
--             an ack from such a twin would acknowledge a page it never saw.
-- Returns:    true; false when receive has returned nothing of this batch yet (or that page
--             was acknowledged already).
-- Raises:     PQ008 unknown batch; PQ009 not the current batch of its consumer/worker, or the
--             current page is not the one ending at last_msg_id / last_txid.
-- Tables:     subscription (update), progress (rows of the batch removed when it is finished).
-- When the acknowledged page was the last of the batch, the batch is finished and the next
-- receive starts the next one; otherwise the next receive returns the next page.
CREATE OR REPLACE FUNCTION pglogq.ack(batch_id bigint, last_msg_id bigint DEFAULT NULL, last_txid xid8 DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
BEGIN
    h := pglogq._holder(batch_id);
    IF h.page_end_txid IS NULL THEN
        RETURN false;
    END IF;
    IF (last_msg_id IS NOT NULL AND h.page_end_id <> last_msg_id)
       OR (last_txid IS NOT NULL AND h.page_end_txid <> last_txid) THEN
        RAISE EXCEPTION 'the page of batch % ending at message % was acknowledged already; the current page ends at message %',
            batch_id, coalesce(last_msg_id::text, '?'), h.page_end_id
            USING ERRCODE = 'PQ009',
                  HINT = 'another process acknowledged it: do two processes use the same consumer or worker name?';
    END IF;
    IF h.page_more THEN
        UPDATE pglogq.subscription s
           SET page_prio = h.page_end_prio, page_txid = h.page_end_txid, page_id = h.page_end_id,
               page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL,
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp()
         WHERE s.sub_id = h.sub_id;
    ELSE
        UPDATE pglogq.subscription s
           SET batch_id = NULL, batch_prev_tick = NULL, batch_cur_tick = NULL, batch_big = NULL,
               batch_started_at = NULL, page_prio = NULL, page_txid = NULL, page_id = NULL,
               page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL,
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp()
         WHERE s.sub_id = h.sub_id;
    END IF;
    DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id AND p.batch_id = ack.batch_id;
    RETURN true;
END $$;
