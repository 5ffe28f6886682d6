-- pglogq._cursor_jump(sub_id, target_tick): record that a consumer's cursor jumps (seek,
-- retention) instead of moving by receiving.  Call it before the cursor is moved.
-- Parameters: sub_id  the consumer (parent_id NULL); target_tick  where its cursor goes
-- Returns:    nothing.
-- Raises:     nothing.
-- Tables:     sub_state (update of handed_from), handed_run (insert; delete of runs whose
--             events are all gone), tick, event (read).
-- The run of receiving that ends here (from handed_from to the cursor tick, an open batch
-- counted whole) is kept in handed_run; the next run starts at target_tick.  See
-- pglogq._cancel_handed for what the runs are for.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq._cursor_jump(sub_id integer, target_tick bigint)
RETURNS void LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    c pglogq.subscription;
    cur_snap pg_snapshot;
    target_snap pg_snapshot;
    oldest xid8;
BEGIN
    SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = _cursor_jump.sub_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- a partitioned consumer: its fastest stream's cursor (the run is then counted at most too
    -- long: cancel refuses an event it cannot prove unhanded)
    SELECT t.tick_snapshot INTO cur_snap FROM pglogq.tick t
     WHERE t.queue_id = c.queue_id
       AND t.tick_id = greatest(c.last_tick, (SELECT max(s.last_tick) FROM pglogq.subscription s
                                               WHERE s.parent_id = c.sub_id AND s.stream IS NOT NULL));
    SELECT t.tick_snapshot INTO target_snap FROM pglogq.tick t
     WHERE t.queue_id = c.queue_id AND t.tick_id = target_tick;
    IF cur_snap IS NOT NULL AND cur_snap::text IS DISTINCT FROM c.handed_from::text THEN
        INSERT INTO pglogq.handed_run (sub_id, from_snap, to_snap)
        VALUES (c.sub_id, c.handed_from, cur_snap);
    END IF;
    UPDATE pglogq.sub_state s SET handed_from = coalesce(target_snap, cur_snap, s.handed_from)
     WHERE s.sub_id = c.sub_id;
    -- runs whose events have all been truncated are of no use any more
    SELECT min(e.ev_txid) INTO oldest FROM pglogq.event e WHERE e.ev_queue = c.queue_id;
    DELETE FROM pglogq.handed_run r
     WHERE r.sub_id = c.sub_id AND (oldest IS NULL OR pg_snapshot_xmax(r.to_snap) <= oldest);
END $$;
