-- pglogq._cluster_owner(slot): the shard that owns a hash slot in this database's map.
-- Parameters: slot  0..16383 (pglogq.key_slot of a key)
-- Returns:    the owning shard's name; NULL when this database is not a cluster member.
-- Raises:     nothing.
-- Tables:     cluster_slots (read: one probe of its primary key).
CREATE OR REPLACE FUNCTION pglogq._cluster_owner(slot integer)
RETURNS text LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT s.shard_name FROM pglogq.cluster_slots s
     WHERE s.slot_lo <= _cluster_owner.slot AND s.slot_hi >= _cluster_owner.slot
     ORDER BY s.slot_lo DESC LIMIT 1
$$;
