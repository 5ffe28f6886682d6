-- pglogq.cluster_fence_passed(queue_name, consumer_name, fence_tick): on the source shard of a
-- move, has a consumer finished the queue up to the move's fence?
-- Parameters: queue_name; consumer_name; fence_tick  the queue's fence (a gated receive on the
--             target names it; 0: nothing to wait for)
-- Returns:    true when the consumer (all its cooperating workers and partition streams) has
--             moved past every batch up to the fence and holds none open that starts below it,
--             and nothing of a key this shard no longer owns waits for it: no retry, no delayed
--             send of the queue, no event (a retry or a delayed send delivered again, a replay)
--             not yet passed.  false otherwise.
-- Raises:     PQ082 not a cluster member; PQ001 unknown queue; PQ002 unknown consumer (not with
--             fence_tick 0, which is always passed);
--             PQ019 invalid argument (fence_tick NULL or negative).
-- Tables:     subscription, tick, retry, delayed, event, cluster_slots (read).
-- The client calls this before cluster_gate_pass on the target: then every event of the moved
-- keys handled here is acknowledged before the consumer gets that key's new events there.
-- A delayed send of a moved key due late keeps the answer false until it is delivered here and
-- acknowledged: the price of that key's order.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq.cluster_fence_passed(queue_name text, consumer_name text, fence_tick bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    n pglogq.cluster_node := pglogq._cluster_node();
    q pglogq.queue;
    c pglogq.subscription;
    done bigint;
    snap pg_snapshot;
    holders integer[];
BEGIN
    IF fence_tick IS NULL OR fence_tick < 0 THEN
        RAISE EXCEPTION 'invalid fence tick %: a tick id >= 0 is expected', coalesce(fence_tick::text, 'NULL')
            USING ERRCODE = 'PQ019';
    END IF;
    IF fence_tick = 0 THEN
        RETURN true;  -- the source had no such queue at the export: nothing to wait for
    END IF;
    q := pglogq._queue(queue_name);
    c := pglogq._consumer(q.queue_id, queue_name, consumer_name);
    -- the slowest cursor (the consumer's, which on a partitioned queue stands at or behind its
    -- slowest partition stream with something to read -- a stream with nothing to read keeps
    -- its cursor where it last read, see _stream_skip --, and the urgent lane's) and the start of
    -- every open batch: what the consumer has passed for sure
    SELECT least(min(s.last_tick) FILTER (WHERE s.stream < 0 OR s.parent_id IS NULL),
                 min(s.batch_prev_tick) FILTER (WHERE s.batch_id IS NOT NULL)),
           array_agg(s.sub_id)
      INTO done, holders
      FROM pglogq.subscription s WHERE s.sub_id = c.sub_id OR s.parent_id = c.sub_id;
    IF done IS NULL OR done < fence_tick THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM pglogq.retry r
                WHERE r.queue_id = q.queue_id AND r.sub_id = ANY (holders) AND r.ev_key IS NOT NULL
                  AND pglogq._cluster_owner(pglogq.key_slot(r.ev_key)) IS DISTINCT FROM n.shard_name)
       OR EXISTS (SELECT 1 FROM pglogq.delayed d
                   WHERE d.queue_id = q.queue_id AND d.ev_key IS NOT NULL
                     AND pglogq._cluster_owner(pglogq.key_slot(d.ev_key)) IS DISTINCT FROM n.shard_name) THEN
        RETURN false;
    END IF;
    SELECT t.tick_snapshot INTO snap FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = done;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- events after what was passed (only a retry, delayed send or replay delivered again can be
    -- of a key this shard no longer owns)
    RETURN NOT EXISTS (
        SELECT 1 FROM pglogq.event e
         WHERE e.ev_queue = q.queue_id AND e.ev_txid >= pg_snapshot_xmin(snap)
           AND NOT pg_visible_in_snapshot(e.ev_txid, snap)
           AND e.ev_key IS NOT NULL AND (e.ev_owner IS NULL OR e.ev_owner = ANY (holders))
           AND pglogq._cluster_owner(pglogq.key_slot(e.ev_key)) IS DISTINCT FROM n.shard_name);
END $$;
