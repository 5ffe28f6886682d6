-- pglogq._cluster_move_of(move, n): a move given as JSON, checked against this shard's map.
-- Parameters: move  {"move_id": n, "map_version": v, "slot_lo": lo, "slot_hi": hi,
--             "from_shard": name, "to_shard": name} (other keys are ignored);
--             n  this database's cluster_node row
-- Returns:    the pglogq.cluster_move row it describes (state 'importing', not stored).
-- Raises:     PQ081 invalid move: not an object, move_id or map_version not a whole number
--             >= 1, slots not within 0..16383 with lo <= hi, a shard that is not in the map,
--             the same shard twice.
-- Tables:     cluster_shard (read).
CREATE OR REPLACE FUNCTION pglogq._cluster_move_of(move jsonb, n pglogq.cluster_node)
RETURNS pglogq.cluster_move LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    m pglogq.cluster_move;
    f text;
BEGIN
    IF move IS NULL OR jsonb_typeof(move) <> 'object' THEN
        RAISE EXCEPTION 'invalid move: a JSON object is expected, got %', coalesce(jsonb_typeof(move), 'NULL')
            USING ERRCODE = 'PQ081';
    END IF;
    FOREACH f IN ARRAY ARRAY['move_id', 'map_version', 'slot_lo', 'slot_hi'] LOOP
        IF jsonb_typeof(move -> f) IS DISTINCT FROM 'number'
           OR (move ->> f)::numeric <> trunc((move ->> f)::numeric)
           OR (move ->> f)::numeric < (CASE WHEN f LIKE 'slot%' THEN 0 ELSE 1 END)
           OR (move ->> f)::numeric > (CASE WHEN f LIKE 'slot%' THEN 16383 ELSE 9000000000000000000 END) THEN
            RAISE EXCEPTION 'invalid move: % must be %, got %', f,
                CASE WHEN f LIKE 'slot%' THEN 'a slot within 0..16383' ELSE 'a whole number >= 1' END,
                coalesce(left(move ->> f, 40), 'none') USING ERRCODE = 'PQ081';
        END IF;
    END LOOP;
    m.move_id := (move ->> 'move_id')::bigint;
    m.map_version := (move ->> 'map_version')::bigint;
    m.slot_lo := (move ->> 'slot_lo')::integer;
    m.slot_hi := (move ->> 'slot_hi')::integer;
    IF m.slot_lo > m.slot_hi THEN
        RAISE EXCEPTION 'invalid move: slot_lo % is above slot_hi %', m.slot_lo, m.slot_hi USING ERRCODE = 'PQ081';
    END IF;
    FOREACH f IN ARRAY ARRAY['from_shard', 'to_shard'] LOOP
        IF jsonb_typeof(move -> f) IS DISTINCT FROM 'string'
           OR NOT EXISTS (SELECT 1 FROM pglogq.cluster_shard s WHERE s.shard_name = move ->> f) THEN
            RAISE EXCEPTION 'invalid move: % % is not a shard of the map (version %)', f,
                coalesce('"' || left(move ->> f, 80) || '"', 'none'), n.map_version USING ERRCODE = 'PQ081';
        END IF;
    END LOOP;
    m.from_shard := move ->> 'from_shard';
    m.to_shard := move ->> 'to_shard';
    IF m.from_shard = m.to_shard THEN
        RAISE EXCEPTION 'invalid move: from_shard and to_shard are both "%"', m.from_shard USING ERRCODE = 'PQ081';
    END IF;
    m.state := 'importing';
    RETURN m;
END $$;
