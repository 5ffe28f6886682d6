-- pglogq.ack(batch_id, last_msg_id, last_txid): acknowledge the page that receive returned last.
-- Parameters: batch_id  from receive
--             last_msg_id, last_txid  the msg_id and txid of the last message of the page being
--             acknowledged (optional; clients pass them): they name the page, and the ack is
--             refused unless the page receive returned last for this holder ends exactly there
--             and is not acknowledged yet.  So when two processes use the same consumer (or
--             worker) name, the first ack of a page wins and the other's is refused; an ack of
--             a page that another receive has replaced meanwhile is refused too.  Without them
--             an ack acknowledges whatever page receive returned last.
-- Returns:    true; false (only without last_msg_id / last_txid) when receive has returned
--             nothing of this batch yet, or that page was acknowledged already.
-- Raises:     PQ008 unknown batch; PQ009 not the current batch of its consumer/worker, or the
--             page named by last_msg_id / last_txid is not the current unacknowledged page.
-- Tables:     subscription (lock), sub_state (update), progress (rows of the batch removed), attempt (rows of the
--             page's events removed).
-- When the acknowledged page was the last of the batch, the batch is closed (_close_batch) and
-- the next receive starts the next one; otherwise the next receive returns the next page.  On
-- the stream of a partition where an event of the page was nacked (strict order, see nack), the
-- page is acknowledged up to that event only: it and the rest of the page come again, in order,
-- once the nack's delay has passed (the stream's hold stays until receive hands them out),
-- under a new batch id: the batch's pages start earlier again, and one of them could end where
-- this page ends (a repeat of this ack, after a lost reply, would be taken for it).
-- Which page an ack names: its batch id and last event suffice, because a page handed out
-- again that ends elsewhere gets a new id (see receive).
CREATE OR REPLACE FUNCTION pglogq.ack(batch_id bigint, last_msg_id bigint DEFAULT NULL, last_txid xid8 DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
BEGIN
    -- the holder, locked after the queue name's lock (_holder: the one owner of that order);
    -- no row holds the batch: PQ008 or PQ009
    h := pglogq._holder(batch_id);
    IF h.page_end_txid IS NULL THEN
        IF last_msg_id IS NULL AND last_txid IS NULL THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'the page of batch % ending at message % is not the current page: it was acknowledged already',
            batch_id, coalesce(last_msg_id::text, last_txid::text)
            USING ERRCODE = 'PQ009',
                  HINT = 'another process acknowledged it: do two processes use the same consumer or worker name?';
    END IF;
    IF (last_msg_id IS NOT NULL AND h.page_end_id <> last_msg_id)
       OR (last_txid IS NOT NULL AND h.page_end_txid <> last_txid) THEN
        RAISE EXCEPTION 'the page of batch % ending at message % was acknowledged already or replaced by another receive; the current page ends at message %',
            batch_id, coalesce(last_msg_id::text, last_txid::text), h.page_end_id
            USING ERRCODE = 'PQ009',
                  HINT = 'another process acknowledged it or received another page of the batch meanwhile: '
                         'do two processes use the same consumer or worker name?';
    END IF;
    IF h.hold_id IS NOT NULL THEN
        UPDATE pglogq.sub_state s
           SET batch_id = nextval('pglogq.batch_seq'),
               page_prio = NULL, page_txid = h.hold_txid, page_id = h.hold_id - 1,
               page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL,
               started_prio = NULL, started_txid = NULL, started_id = NULL, released_at = NULL,
               -- the hold stays (hold_txid, hold_id, hold_until: the event waiting for its retry,
               -- which lookup and jobs show through _retries) until the page is handed out again
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp()
         WHERE s.sub_id = h.sub_id;
        DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id AND p.batch_id = ack.batch_id;
        DELETE FROM pglogq.attempt a
         WHERE a.sub_id = h.sub_id AND (a.ev_txid, a.msg_id) < (h.hold_txid, h.hold_id)
           AND pglogq._page_position(h, a.ev_priority, a.ev_txid, a.msg_id) <= 0;
    ELSIF h.page_more THEN
        UPDATE pglogq.sub_state s
           SET page_prio = h.page_end_prio, page_txid = h.page_end_txid, page_id = h.page_end_id,
               page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL,
               started_prio = NULL, started_txid = NULL, started_id = NULL, released_at = NULL,
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp()
         WHERE s.sub_id = h.sub_id;
        DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id AND p.batch_id = ack.batch_id;
        DELETE FROM pglogq.attempt a
         WHERE a.sub_id = h.sub_id AND pglogq._page_position(h, a.ev_priority, a.ev_txid, a.msg_id) <= 0;
    ELSE
        PERFORM pglogq._close_batch(h.sub_id, true);
    END IF;
    RETURN true;
END $$;
