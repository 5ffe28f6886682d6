-- pglogq._lease_events(queue_id, consumer_sub_id): the events the workers of a share consumer hold
-- in their leases now and have not acknowledged, each with its delivery count.
-- Parameters: queue_id; consumer_sub_id  the share consumer's subscription row (parent_id NULL)
-- Returns:    rows (holder, ev_id, ev_type, returned, started, delivery_count): holder  the
--             sub_id of the worker row holding the lease (a ceded tail's row included);
--             returned  in the page receive returned last (false: leased, not returned yet);
--             started  a handler started on it (the start frontier); delivery_count  the hand-out
--             this is: 1 + its failed deliveries so far (the nacks its copy in the log carries,
--             ev_retry, and the crashes counted for the holder in pglogq.attempt): the
--             retry_count receive returns + 1.  Events nacked in the lease (a retry or a dead
--             letter of this consumer) and cancelled events are left out.
-- Raises:     nothing.
-- Tables:     subscription, tick, event, cancelled (read, through _open_batch_events), attempt,
--             retry, dead_letter (read).
-- A lease is its worker's open batch from its page start to lease_end_*: the events at page
-- positions 0 and 1 of its holder (_open_batch_events, the one reader of open batches, bounds
-- each lease's read by its end).  Hand-outs that ended before a handler started (a tail ceded,
-- a lease taken over before its events started) are not deliveries: nothing ran.  Reads only.
CREATE OR REPLACE FUNCTION pglogq._lease_events(queue_id integer, consumer_sub_id integer)
RETURNS TABLE (holder integer, ev_id bigint, ev_type text, returned boolean, started boolean,
               delivery_count integer)
LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.holder, e.ev_id, e.ev_type, e.want = 0,
           e.want = 0 AND pglogq._page_position(h, e.ev_priority, e.ev_txid, e.ev_id, true) = 0,
           e.ev_retry + coalesce(a.crashes, 0) + 1
      FROM (SELECT 0 AS want, x.* FROM pglogq._open_batch_events(_lease_events.queue_id,
                                                                  _lease_events.consumer_sub_id, 0,
                                                                  leases_only => true) x
            UNION ALL
            SELECT 1 AS want, x.* FROM pglogq._open_batch_events(_lease_events.queue_id,
                                                                  _lease_events.consumer_sub_id, 1,
                                                                  leases_only => true) x) e
      JOIN pglogq.subscription h ON h.sub_id = e.holder
      LEFT JOIN pglogq.attempt a ON a.sub_id = e.holder AND a.msg_id = e.ev_id
     WHERE h.parent_id = _lease_events.consumer_sub_id AND h.lease_end_txid IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pglogq.retry r
                        WHERE r.sub_id = _lease_events.consumer_sub_id AND r.msg_id = e.ev_id)
       AND NOT EXISTS (SELECT 1 FROM pglogq.dead_letter d
                        WHERE d.sub_id = _lease_events.consumer_sub_id AND d.msg_id = e.ev_id);
END $$;
