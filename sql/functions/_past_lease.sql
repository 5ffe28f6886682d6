-- pglogq._past_lease(h, prio, txid, id): is this event of h's batch after the end of h's lease?
-- Parameters: h  a holder row; prio, txid, id  the event's key
-- Returns:    false when h holds no lease (lease_end_txid NULL: the whole batch is its own), else
--             whether the event comes after the lease's last event in the batch's delivery order:
--             transaction order for a big batch, else priority (descending), then transaction
--             order (the same order when every event has the default priority).
-- Tables:     none.
-- A worker of a share consumer reads its lease as its batch, bounded by this test (receive);
-- the events after it belong to other leases.
CREATE OR REPLACE FUNCTION pglogq._past_lease(h pglogq.subscription, prio integer, txid xid8, id bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT h.lease_end_txid IS NOT NULL
           AND CASE WHEN h.batch_big THEN (txid, id) > (h.lease_end_txid, h.lease_end_id)
                    ELSE (-prio, txid, id) > (-h.lease_end_prio, h.lease_end_txid, h.lease_end_id) END
$$;
