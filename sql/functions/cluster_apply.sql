-- pglogq.cluster_apply(map): take a newer shard map.
-- Parameters: map  the whole map (see _cluster_check_map): a version above this shard's, the
--             shards (this shard among them) and the ranges covering slots 0..16383 once
-- Returns:    true if the map was taken; false when it is this shard's map already (same
--             version, same shards and ranges: a repeated call changes nothing).
-- Raises:     PQ082 not a cluster member; PQ081 invalid map, or one without this shard;
--             PQ080 stale map: a version below this shard's, or equal with another content (the
--             message names both versions).
-- Tables:     cluster_shard, cluster_slots, cluster_node (written), cluster_epoch (set when this
--             shard's slots change: it loses or gains some), queue (read).
-- A version may skip versions (a shard catching up).  When the map takes slots away from this
-- shard, the call first waits for every transaction sending to a sharded queue, as an export
-- does (_cluster_lock_queues), so no event of those slots is sent here after it commits.
CREATE OR REPLACE FUNCTION pglogq.cluster_apply(map jsonb)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
    v bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.cluster'));
    n := pglogq._cluster_node();
    v := pglogq._cluster_check_map(map, n.cluster_name);
    IF v < n.map_version THEN
        RAISE EXCEPTION 'stale shard map: version %, this shard has version %', v, n.map_version
            USING ERRCODE = 'PQ080', HINT = 'read the current map from a shard (pglogq.cluster_map())';
    END IF;
    IF v = n.map_version THEN
        IF pglogq._cluster_canon(map) = pglogq._cluster_canon(NULL) THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'stale shard map: version % differs from this shard''s map of the same version %', v, n.map_version
            USING ERRCODE = 'PQ080', HINT = 'a changed map takes a new version';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(map -> 'shards') e WHERE e ->> 'name' = n.shard_name) THEN
        RAISE EXCEPTION 'invalid shard map: it does not list this shard "%"', n.shard_name
            USING ERRCODE = 'PQ081', HINT = 'a shard removed from the cluster calls pglogq.cluster_leave()';
    END IF;
    IF EXISTS (
        SELECT 1 FROM pglogq.cluster_slots s
         WHERE s.shard_name = n.shard_name
           AND EXISTS (SELECT 1 FROM jsonb_array_elements(map -> 'ranges') e
                        WHERE e ->> 'shard' <> n.shard_name
                          AND (e ->> 'lo')::integer <= s.slot_hi AND (e ->> 'hi')::integer >= s.slot_lo)) THEN
        PERFORM pglogq._cluster_lock_queues();
    END IF;
    -- any change of this shard's own slots, taken in or given away, is a map change for the
    -- snapshots taken before it (_cluster_route compares the epoch with the snapshot's version)
    IF (SELECT coalesce(jsonb_agg(e ORDER BY (e ->> 'lo')::integer), '[]') FROM jsonb_array_elements(pglogq._cluster_canon(map) -> 'ranges') e
         WHERE e ->> 'shard' = n.shard_name)
       IS DISTINCT FROM
       (SELECT coalesce(jsonb_agg(e ORDER BY (e ->> 'lo')::integer), '[]') FROM jsonb_array_elements(pglogq._cluster_canon(NULL) -> 'ranges') e
         WHERE e ->> 'shard' = n.shard_name) THEN
        PERFORM setval('pglogq.cluster_epoch', greatest(v, coalesce(pg_sequence_last_value('pglogq.cluster_epoch'), 0)));
    END IF;
    PERFORM pglogq._cluster_store(map, v);
    RETURN true;
END $$;
