-- pglogq._cluster_check_move(m, n): refuse a move this shard cannot make now.
-- Parameters: m  the move (from _cluster_move_of); n  this database's cluster_node row
-- Returns:    nothing (void).
-- Raises:     PQ080 stale or gap: the move's map version is not this shard's version + 1 (the
--             message names both); PQ081 the slots are not all owned by from_shard in this
--             shard's map, or they overlap an unfinished move of this shard.
-- Tables:     cluster_slots, cluster_move (read).
CREATE OR REPLACE FUNCTION pglogq._cluster_check_move(m pglogq.cluster_move, n pglogq.cluster_node)
RETURNS void LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    other pglogq.cluster_move;
BEGIN
    IF m.map_version <= n.map_version THEN
        RAISE EXCEPTION 'stale move: it makes map version %, this shard has version % already', m.map_version, n.map_version
            USING ERRCODE = 'PQ080', HINT = 'read the current map (pglogq.cluster_map()) and plan the move again';
    ELSIF m.map_version > n.map_version + 1 THEN
        RAISE EXCEPTION 'move out of order: it makes map version %, this shard has version % (apply versions % to % first)',
            m.map_version, n.map_version, n.map_version + 1, m.map_version - 1
            USING ERRCODE = 'PQ080', HINT = 'pglogq.cluster_apply(map) brings a shard up to date';
    END IF;
    SELECT * INTO other FROM pglogq.cluster_move x
     WHERE x.state <> 'done' AND x.slot_lo <= m.slot_hi AND x.slot_hi >= m.slot_lo
     ORDER BY x.move_id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid move: slots %-% overlap the unfinished move % (slots %-%, % to %)',
            m.slot_lo, m.slot_hi, other.move_id, other.slot_lo, other.slot_hi, other.from_shard, other.to_shard
            USING ERRCODE = 'PQ081', HINT = 'finish that move first (pglogq cluster move-slots --resume)';
    END IF;
    IF EXISTS (SELECT 1 FROM pglogq.cluster_slots s
                WHERE s.slot_lo <= m.slot_hi AND s.slot_hi >= m.slot_lo AND s.shard_name <> m.from_shard) THEN
        RAISE EXCEPTION 'invalid move: slots %-% are not all owned by shard "%" in map version %',
            m.slot_lo, m.slot_hi, m.from_shard, n.map_version USING ERRCODE = 'PQ081';
    END IF;
END $$;
