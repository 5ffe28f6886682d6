-- pglogq._event_txid_floor(queue_id, msg_id): a txid the event with this id cannot be below.
-- Parameters: queue_id; msg_id
-- Returns:    xid8 (0 when the kept ticks cannot tell: the caller then scans every stored event).
-- Raises:     nothing.
-- Tables:     tick (read).
-- Lets a look-up by message id use the (ev_txid, ev_id) index.  The ticker reads the id
-- sequence before it takes the snapshot, so an id above a tick's tick_event_seq was drawn after
-- that tick began, by a transaction still running when any earlier tick's snapshot was taken:
-- its txid is at least that earlier snapshot's xmin (a delayed event moved by the pump, or a
-- retry, is inserted later still).
-- tick_event_seq never decreases with the tick id, so the order (tick_event_seq, tick_id) is the
-- order of the ticks: tick_seq_idx serves the read with one probe, however many ticks are kept
-- (in tick id order it walked back from the newest tick: O(ticks after the event)).
-- plpgsql with a custom plan, so that the plan reads the queue's own tick partition only: a SQL
-- function is planned (before PostgreSQL 18) without its arguments' values, over every queue's
-- tick partitions, which it then locks - a cost and a lock count that grew with the queues.
CREATE OR REPLACE FUNCTION pglogq._event_txid_floor(queue_id integer, msg_id bigint)
RETURNS xid8 LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
BEGIN
    RETURN coalesce(
        (SELECT pg_snapshot_xmin(t.tick_snapshot) FROM pglogq.tick t
          WHERE t.queue_id = _event_txid_floor.queue_id AND t.tick_event_seq < _event_txid_floor.msg_id
          ORDER BY t.tick_event_seq DESC, t.tick_id DESC OFFSET 1 LIMIT 1),
        '0'::xid8);
END $$;
