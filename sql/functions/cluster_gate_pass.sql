-- pglogq.cluster_gate_pass(queue_name, consumer_name, move_id): on the target shard of a move,
-- let a consumer receive again.
-- Parameters: queue_name; consumer_name; move_id  the move named by the gated receive (PQ079)
-- Returns:    true if the gate was removed; false when the consumer had none for that move.
-- Raises:     PQ082 not a cluster member; PQ001 unknown queue; PQ002 unknown consumer;
--             PQ019 invalid argument (move_id NULL); PQ081 unknown move; PQ079 the move has no fence yet (its source has
--             not exported: nothing can be checked).
-- Tables:     cluster_move (read), cluster_gate (delete).
-- The caller asserts that cluster_fence_passed(queue, consumer, fence) was true on the move's
-- source: the server cannot check another server.
CREATE OR REPLACE FUNCTION pglogq.cluster_gate_pass(queue_name text, consumer_name text, move_id bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node := pglogq._cluster_node();
    q pglogq.queue;
    c pglogq.subscription;
    m pglogq.cluster_move;
BEGIN
    IF move_id IS NULL THEN
        RAISE EXCEPTION 'move_id must not be NULL' USING ERRCODE = 'PQ019';
    END IF;
    q := pglogq._queue(queue_name);
    c := pglogq._consumer(q.queue_id, queue_name, consumer_name);
    SELECT * INTO m FROM pglogq.cluster_move x WHERE x.move_id = cluster_gate_pass.move_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'invalid move: this shard "%" knows no move %', n.shard_name, move_id USING ERRCODE = 'PQ081';
    END IF;
    IF m.fences IS NULL THEN
        RAISE EXCEPTION 'gated: move % has no fence yet (shard "%" has not exported the slots)', m.move_id, m.from_shard
            USING ERRCODE = 'PQ079',
                  DETAIL = jsonb_build_object('move_id', m.move_id, 'from_shard', m.from_shard, 'fence', NULL)::text,
                  HINT = 'wait for the move to finish (pglogq cluster status)';
    END IF;
    DELETE FROM pglogq.cluster_gate g
     WHERE g.move_id = m.move_id AND g.queue_id = q.queue_id AND g.sub_id = c.sub_id;
    RETURN FOUND;
END $$;
