-- pglogq.cluster_join(cluster_name, shard_name, map): make this database a shard of a cluster.
-- Parameters: cluster_name  the cluster's name; shard_name  this database's name in the map
--             (both ASCII letters, digits, _.-, starting with a letter, at most 63 bytes);
--             map  the shard map (see _cluster_check_map: version, shards with their DSNs
--             without password, ranges covering slots 0..16383 once); it must list shard_name
-- Returns:    true if this database joined (or, a member already, took the newer map); false
--             when it was a member of that cluster under that name with this very map.
-- Raises:     PQ004 invalid cluster or shard name; PQ081 invalid map, shard_name not in it, or
--             a member of another cluster or under another name already (cluster_leave first);
--             PQ080 a member already with a newer map, or the same version with another content.
-- Tables:     cluster_node (insert), cluster_shard, cluster_slots (written), queue (every queue
--             becomes sharded), cluster_epoch (set to the map version).
-- Locks: the cluster lock (an advisory lock every function that changes the map takes first).
CREATE OR REPLACE FUNCTION pglogq.cluster_join(cluster_name text, shard_name text, map jsonb)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
    v bigint;
BEGIN
    PERFORM pglogq._check_name(cluster_name, 'cluster', 63);
    PERFORM pglogq._check_name(shard_name, 'shard', 63);
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.cluster'));
    v := pglogq._cluster_check_map(map, cluster_name);
    IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(map -> 'shards') e WHERE e ->> 'name' = cluster_join.shard_name) THEN
        RAISE EXCEPTION 'invalid shard map: shard "%" (this database) is not listed in it', shard_name
            USING ERRCODE = 'PQ081';
    END IF;
    SELECT * INTO n FROM pglogq.cluster_node;
    IF FOUND THEN
        IF n.cluster_name <> cluster_join.cluster_name OR n.shard_name <> cluster_join.shard_name THEN
            RAISE EXCEPTION 'this database is shard "%" of cluster "%" already', n.shard_name, n.cluster_name
                USING ERRCODE = 'PQ081', HINT = 'pglogq.cluster_leave() ends that membership';
        END IF;
        RETURN pglogq.cluster_apply(map);
    END IF;
    INSERT INTO pglogq.cluster_node (cluster_name, shard_name, map_version)
    VALUES (cluster_join.cluster_name, cluster_join.shard_name, v);
    PERFORM pglogq._cluster_store(map, v);
    UPDATE pglogq.queue SET sharded = true WHERE NOT sharded;
    PERFORM setval('pglogq.cluster_epoch', greatest(v, coalesce(pg_sequence_last_value('pglogq.cluster_epoch'), 0)));
    RETURN true;
END $$;
