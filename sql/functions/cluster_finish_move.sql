-- pglogq.cluster_finish_move(move_id, fences): mark a move done on one of its two shards.
-- Parameters: move_id  the move; fences  on the target: the fences cluster_fence returned on the
--             source ({queue_name: tick_id}, recorded here for the gates); on the source: NULL
--             or the same fences
-- Returns:    true if the move was marked done; false when it was done already with these
--             fences (a repeated call changes nothing).
-- Raises:     PQ082 not a cluster member; PQ019 invalid argument (move_id NULL); PQ081 unknown
--             move, fences not an object of queue names to whole numbers >= 1 (target), the source has no fences
--             yet, or fences differ from those recorded.
-- Tables:     cluster_move (fences, state done, finished_at).
-- On the target, the consumers' gates stay until each consumer passes its own
-- (cluster_gate_pass); from now on a gated receive names the fence to wait for.
CREATE OR REPLACE FUNCTION pglogq.cluster_finish_move(move_id bigint, fences jsonb)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
    m pglogq.cluster_move;
BEGIN
    IF move_id IS NULL THEN
        RAISE EXCEPTION 'move_id must not be NULL' USING ERRCODE = 'PQ019';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.cluster'));
    n := pglogq._cluster_node();
    SELECT * INTO m FROM pglogq.cluster_move x WHERE x.move_id = cluster_finish_move.move_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'invalid move: this shard "%" knows no move %', n.shard_name, move_id USING ERRCODE = 'PQ081';
    END IF;
    IF m.to_shard = n.shard_name THEN
        IF fences IS NULL OR jsonb_typeof(fences) <> 'object'
           OR EXISTS (SELECT 1 FROM jsonb_each(fences) e
                       WHERE jsonb_typeof(e.value) <> 'number' OR (e.value #>> '{}')::numeric < 1
                          OR (e.value #>> '{}')::numeric <> trunc((e.value #>> '{}')::numeric)
                          OR (e.value #>> '{}')::numeric > 9000000000000000000) THEN
            RAISE EXCEPTION 'invalid move: fences must be a JSON object of queue names to tick ids, got %',
                coalesce(left(fences::text, 120), 'NULL') USING ERRCODE = 'PQ081';
        END IF;
    ELSIF m.fences IS NULL THEN
        RAISE EXCEPTION 'invalid move: move % has no fences yet on this shard', m.move_id
            USING ERRCODE = 'PQ081', HINT = 'call pglogq.cluster_fence(move_id) first';
    END IF;
    IF m.state = 'done' OR (m.to_shard <> n.shard_name AND fences IS NOT NULL) THEN
        IF fences IS NOT NULL AND fences IS DISTINCT FROM m.fences THEN
            RAISE EXCEPTION 'invalid move: move % has other fences: %', m.move_id, left(m.fences::text, 200)
                USING ERRCODE = 'PQ081';
        END IF;
        IF m.state = 'done' THEN
            RETURN false;
        END IF;
    END IF;
    UPDATE pglogq.cluster_move x SET fences = coalesce(cluster_finish_move.fences, x.fences), state = 'done',
                                     finished_at = now()
     WHERE x.move_id = m.move_id;
    RETURN true;
END $$;
