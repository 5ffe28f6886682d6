-- pglogq._cluster_canon(map): the part of a shard map that two maps of one version must share.
-- Parameters: map  a shard map (as cluster_map returns it, or as cluster_apply takes it), valid
--             (see _cluster_check_map); NULL: this database's current map
-- Returns:    {"shards": [{"name", "dsn"}, ...] by name, "ranges": [{"lo", "hi", "shard"}, ...]
--             by lo, adjacent ranges of one shard merged}.
-- Raises:     nothing.
-- Tables:     cluster_shard, cluster_slots (read, for the current map).
CREATE OR REPLACE FUNCTION pglogq._cluster_canon(map jsonb)
RETURNS jsonb LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    shards jsonb;
    ranges jsonb;
BEGIN
    IF map IS NULL THEN
        SELECT coalesce(jsonb_agg(jsonb_build_object('name', s.shard_name, 'dsn', s.dsn) ORDER BY s.shard_name), '[]')
          INTO shards FROM pglogq.cluster_shard s;
        map := jsonb_build_object('shards', shards, 'ranges',
            (SELECT coalesce(jsonb_agg(jsonb_build_object('lo', r.slot_lo, 'hi', r.slot_hi, 'shard', r.shard_name)
                                       ORDER BY r.slot_lo), '[]')
               FROM pglogq.cluster_slots r));
    END IF;
    SELECT coalesce(jsonb_agg(jsonb_build_object('name', e ->> 'name', 'dsn', e ->> 'dsn') ORDER BY e ->> 'name'), '[]')
      INTO shards FROM jsonb_array_elements(map -> 'shards') e;
    -- gaps and islands: a range starts a new group unless it continues the previous one's shard
    WITH r AS (
        SELECT (e ->> 'lo')::integer AS lo, (e ->> 'hi')::integer AS hi, e ->> 'shard' AS shard
          FROM jsonb_array_elements(map -> 'ranges') e
    ), b AS (
        SELECT r.*, CASE WHEN lag(r.shard) OVER w = r.shard AND lag(r.hi) OVER w = r.lo - 1 THEN 0 ELSE 1 END AS brk
          FROM r WINDOW w AS (ORDER BY r.lo)
    ), g AS (
        SELECT b.*, sum(b.brk) OVER (ORDER BY b.lo) AS grp FROM b
    ), m AS (
        SELECT min(g.lo) AS lo, max(g.hi) AS hi, min(g.shard) AS shard FROM g GROUP BY g.grp
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object('lo', m.lo, 'hi', m.hi, 'shard', m.shard) ORDER BY m.lo), '[]')
      INTO ranges FROM m;
    RETURN jsonb_build_object('shards', shards, 'ranges', ranges);
END $$;
