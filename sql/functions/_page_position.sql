-- pglogq._page_position(h, ev_priority, ev_txid, ev_id, started): where an event of a holder's open
-- batch stands against the page receive returned last (the one owner of that rule).
-- Parameters: h  the holder's subscription row (consumer or cooperating worker) with an open
--             batch; ev_priority, ev_txid, ev_id  the event's delivery key (an event already
--             known to be in that batch: visible in its cur tick, not in its prev tick);
--             started  measure against the handler-start frontier (started_*) instead of the
--             page's end: 0 then means "in the page, a handler has started on it"
-- Returns:    -1  before the page: acknowledged already (at or before page_txid/page_id);
--              0  in the page receive returned last and not acknowledged yet;
--              1  after it: not returned yet (also every event when no page is out, after the
--                 acknowledged part); with started: not started yet;
--              2  after the end of the holder's lease (a worker of a share consumer): the event
--                 is not this holder's (another worker's lease, or not handed out yet).
-- Raises:     nothing.
-- Tables:     none.
-- Delivery order is (priority desc, txid, id), or (txid, id) for a big (streamed) batch; the
-- page runs after its start key (page_*, NULL at the start of the batch) up to and including
-- its end key (page_end_*, NULL when no page is out); a lease ends at lease_end_* (inclusive).  nack and report_progress accept only
-- position 0; cancel's "handed" check counts everything but position 1 against the frontier.
-- PL/pgSQL, not SQL: a SQL function with SET is never inlined and is planned again on every
-- call (milliseconds); PL/pgSQL evaluates the expression with a cached plan.
CREATE OR REPLACE FUNCTION pglogq._page_position(
    h pglogq.subscription, ev_priority integer, ev_txid xid8, ev_id bigint, started boolean DEFAULT false)
RETURNS integer LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    RETURN CASE
        WHEN h.lease_end_txid IS NOT NULL AND
             CASE WHEN h.batch_big THEN (ev_txid, ev_id) > (h.lease_end_txid, h.lease_end_id)
                  ELSE (-ev_priority, ev_txid, ev_id) > (-h.lease_end_prio, h.lease_end_txid, h.lease_end_id) END
        THEN 2
        WHEN h.page_txid IS NOT NULL AND NOT
             CASE WHEN h.batch_big THEN (ev_txid, ev_id) > (h.page_txid, h.page_id)
                  ELSE (-ev_priority, ev_txid, ev_id) > (-h.page_prio, h.page_txid, h.page_id) END
        THEN -1
        WHEN NOT started AND h.page_end_txid IS NOT NULL AND NOT
             CASE WHEN h.batch_big THEN (ev_txid, ev_id) > (h.page_end_txid, h.page_end_id)
                  ELSE (-ev_priority, ev_txid, ev_id) > (-h.page_end_prio, h.page_end_txid, h.page_end_id) END
        THEN 0
        WHEN started AND h.started_txid IS NOT NULL AND NOT
             CASE WHEN h.batch_big THEN (ev_txid, ev_id) > (h.started_txid, h.started_id)
                  ELSE (-ev_priority, ev_txid, ev_id) > (-h.started_prio, h.started_txid, h.started_id) END
        THEN 0
        ELSE 1
    END;
END $$;
