-- pglogq._tick_snapshot(): the snapshot a tick records, taken now in the calling transaction,
-- with that transaction itself marked as running.
-- Parameters: none.
-- Returns:    pg_snapshot.
-- Raises:     nothing (gives the calling transaction an xid if it had none).
-- Tables:     none.
-- PostgreSQL leaves a transaction's own xid out of its snapshots' running list: once any later
-- xid has ended, the own xid lies below xmax and reads as committed.  A tick's snapshot decides
-- which transactions' events are in the batches up to it, and the writing transaction's own
-- events are not committed yet: they belong to a later batch, so its xid is marked running here.
-- The one owner of a tick's snapshot, for both writers of ticks: _tick, and create_queue's tick
-- 1 (which took a plain snapshot: events sent in the transaction that created their queue,
-- while any other write committed meanwhile, were in no batch, never delivered).
CREATE OR REPLACE FUNCTION pglogq._tick_snapshot()
RETURNS pg_snapshot LANGUAGE plpgsql VOLATILE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    me xid8 := pg_current_xact_id();  -- first: the snapshot must be taken after the xid exists
    snap pg_snapshot := pg_current_snapshot();
BEGIN
    IF pg_visible_in_snapshot(me, snap) THEN
        RETURN format('%s:%s:%s', least(pg_snapshot_xmin(snap), me), pg_snapshot_xmax(snap),
                      (SELECT string_agg(x::text, ',' ORDER BY x)
                         FROM (SELECT pg_snapshot_xip(snap) AS x UNION SELECT me) s))::pg_snapshot;
    END IF;
    RETURN snap;
END $$;
