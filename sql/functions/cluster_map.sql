-- pglogq.cluster_map(): this shard's map of its cluster.
-- Parameters: none.
-- Returns:    {"cluster": name, "self": this shard's name, "version": n, "slot_count": 16384,
--             "shards": [{"name", "dsn"}, ...] by name, "ranges": [{"lo", "hi", "shard"}, ...]
--             by lo, "moves": [{"move_id", "map_version", "slot_lo", "slot_hi", "from_shard",
--             "to_shard", "state", "fences", "gates"}, ...]}: the moves of this shard that are
--             not done, or still gate consumers here (gates: how many).
-- Raises:     PQ082 not a cluster member.
-- Tables:     cluster_node, cluster_shard, cluster_slots, cluster_move, cluster_gate (read).
CREATE OR REPLACE FUNCTION pglogq.cluster_map()
RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node := pglogq._cluster_node();
    c jsonb := pglogq._cluster_canon(NULL);
BEGIN
    RETURN jsonb_build_object(
        'cluster', n.cluster_name, 'self', n.shard_name, 'version', n.map_version, 'slot_count', n.slot_count,
        'shards', c -> 'shards', 'ranges', c -> 'ranges',
        'moves', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                          'move_id', m.move_id, 'map_version', m.map_version, 'slot_lo', m.slot_lo,
                          'slot_hi', m.slot_hi, 'from_shard', m.from_shard, 'to_shard', m.to_shard,
                          'state', m.state, 'fences', m.fences,
                          'gates', (SELECT count(*) FROM pglogq.cluster_gate g WHERE g.move_id = m.move_id))
                        ORDER BY m.move_id), '[]')
                    FROM pglogq.cluster_move m
                   WHERE m.state <> 'done' OR EXISTS (SELECT 1 FROM pglogq.cluster_gate g WHERE g.move_id = m.move_id)));
END $$;
