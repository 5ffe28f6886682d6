-- pglogq._cluster_store(map, version): make a valid map this database's current map.
-- Parameters: map  {"shards": [...], "ranges": [...]} checked by _cluster_check_map (adjacent
--             ranges of one shard are stored merged); version  its version
-- Returns:    nothing.
-- Raises:     nothing (the caller checked the map).
-- Tables:     cluster_slots, cluster_shard (replaced), cluster_node (map_version, updated_at).
-- The one writer of the map tables; the caller holds the cluster lock (pglogq.cluster advisory
-- lock) and, when this shard loses slots, the queue name locks (_cluster_lock_queues).
CREATE OR REPLACE FUNCTION pglogq._cluster_store(map jsonb, version bigint)
RETURNS void LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    c jsonb := pglogq._cluster_canon(map);
BEGIN
    DELETE FROM pglogq.cluster_slots;
    DELETE FROM pglogq.cluster_shard s
     WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(c -> 'shards') e WHERE e ->> 'name' = s.shard_name);
    INSERT INTO pglogq.cluster_shard AS s (shard_name, dsn)
    SELECT e ->> 'name', e ->> 'dsn' FROM jsonb_array_elements(c -> 'shards') e
    ON CONFLICT (shard_name) DO UPDATE SET dsn = EXCLUDED.dsn WHERE s.dsn IS DISTINCT FROM EXCLUDED.dsn;
    INSERT INTO pglogq.cluster_slots (slot_lo, slot_hi, shard_name)
    SELECT (e ->> 'lo')::integer, (e ->> 'hi')::integer, e ->> 'shard' FROM jsonb_array_elements(c -> 'ranges') e;
    UPDATE pglogq.cluster_node SET map_version = _cluster_store.version, updated_at = now();
END $$;
