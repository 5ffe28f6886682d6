-- pglogq.cluster_fence(move_id): on the source shard, after the export committed, record the
-- move's fences: a tick of every sharded queue.
-- Parameters: move_id  a move this shard exported
-- Returns:    the fences, {queue_name: tick_id}: every event of the moved slots sent to this
--             shard is in a batch ending at or before its queue's fence (the same fences again
--             when they were recorded already).
-- Raises:     PQ082 not a cluster member; PQ019 invalid argument (move_id NULL); PQ081 unknown
--             move, or not exported by this shard, or its export has not committed (call this in a later
--             transaction); PQ014 not in READ COMMITTED.
-- Tables:     tick (one forced tick per sharded queue, see _tick), cluster_move (fences).
-- Every transaction that sent to a queue before the export has ended (the export waited for
-- it), and none sent a moved key after it: a tick taken once the export is committed closes
-- every such event.
CREATE OR REPLACE FUNCTION pglogq.cluster_fence(move_id bigint)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
    m pglogq.cluster_move;
    f jsonb;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'cluster_fence must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    IF move_id IS NULL THEN
        RAISE EXCEPTION 'move_id must not be NULL' USING ERRCODE = 'PQ019';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.cluster'));
    n := pglogq._cluster_node();
    SELECT * INTO m FROM pglogq.cluster_move x WHERE x.move_id = cluster_fence.move_id;
    IF NOT FOUND OR m.from_shard <> n.shard_name THEN
        RAISE EXCEPTION 'invalid move: this shard "%" exported no move %', n.shard_name, move_id
            USING ERRCODE = 'PQ081';
    END IF;
    IF m.fences IS NOT NULL THEN
        RETURN m.fences;
    END IF;
    IF pg_xact_status(m.exported_txid) = 'in progress' THEN  -- (NULL: too old to be running)
        RAISE EXCEPTION 'invalid move: the export of move % has not committed', m.move_id
            USING ERRCODE = 'PQ081', HINT = 'commit cluster_export first, then call cluster_fence in a new transaction';
    END IF;
    SELECT coalesce(jsonb_object_agg(q.queue_name, pglogq._tick(q.queue_id, true)), '{}') INTO f
      FROM (SELECT x.queue_id, x.queue_name FROM pglogq.queue x WHERE x.sharded ORDER BY x.queue_id) q;
    UPDATE pglogq.cluster_move x SET fences = f WHERE x.move_id = m.move_id;
    RETURN f;
END $$;
