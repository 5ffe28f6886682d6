-- pglogq.cluster_leave(): end this database's membership of its cluster.
-- Parameters: none.
-- Returns:    true if it was a member; false when it was none (nothing changed).
-- Raises:     nothing.
-- Tables:     cluster_gate, cluster_move, cluster_slots, cluster_shard, cluster_node (emptied),
--             queue (no queue is sharded any more).
-- What a shard removed from the map does (pglogq cluster remove-shard, after its slots moved
-- away): its queues then accept every key again, and no receive is gated.
CREATE OR REPLACE FUNCTION pglogq.cluster_leave()
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.cluster'));
    IF NOT EXISTS (SELECT 1 FROM pglogq.cluster_node) THEN
        RETURN false;
    END IF;
    DELETE FROM pglogq.cluster_gate;
    DELETE FROM pglogq.cluster_move;
    DELETE FROM pglogq.cluster_slots;
    DELETE FROM pglogq.cluster_shard;
    DELETE FROM pglogq.cluster_node;
    UPDATE pglogq.queue SET sharded = false WHERE sharded;
    RETURN true;
END $$;
