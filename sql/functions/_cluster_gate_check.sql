-- pglogq._cluster_gate_check(q, sub_id): refuse a receive of a consumer gated by a move.
-- Parameters: q  the queue row (sharded); sub_id  the consumer's sub_id
-- Returns:    nothing (void) when the consumer has no gate on this queue.
-- Raises:     PQ079 gated: this shard took slots over and the consumer has not finished the old
--             shard up to the move's fence (DETAIL is the JSON {"move_id", "from_shard",
--             "fence"}: fence is the tick of the queue on the old shard, NULL while the move has
--             none yet, 0 when the old shard had no such queue at the export).
-- Tables:     cluster_gate, cluster_move (read).
-- The gate holds the whole queue on this shard for that consumer (not only the moved keys):
-- the client checks cluster_fence_passed on the old shard, then calls cluster_gate_pass here.
CREATE OR REPLACE FUNCTION pglogq._cluster_gate_check(q pglogq.queue, sub_id integer)
RETURNS void LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    m pglogq.cluster_move;
    fence bigint;
BEGIN
    SELECT mv.* INTO m FROM pglogq.cluster_gate g JOIN pglogq.cluster_move mv ON mv.move_id = g.move_id
     WHERE g.queue_id = q.queue_id AND g.sub_id = _cluster_gate_check.sub_id
     ORDER BY g.move_id LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    fence := CASE WHEN m.fences IS NOT NULL THEN coalesce((m.fences ->> q.queue_name)::bigint, 0) END;
    RAISE EXCEPTION 'gated: the consumer must finish queue "%" on shard "%" up to tick % before it receives here (move %)',
        q.queue_name, m.from_shard, coalesce(fence::text, '(not fenced yet)'), m.move_id
        USING ERRCODE = 'PQ079',
              DETAIL = jsonb_build_object('move_id', m.move_id, 'from_shard', m.from_shard, 'fence', fence)::text,
              HINT = 'when pglogq.cluster_fence_passed(queue, consumer, fence) is true on that shard, '
                     'call pglogq.cluster_gate_pass(queue, consumer, move_id) here';
END $$;
