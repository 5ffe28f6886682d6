-- pglogq._cluster_give(slot_lo, slot_hi, shard_name, version): give a slot range to one shard.
-- Parameters: slot_lo, slot_hi  the range (checked by the caller); shard_name  its new owner (a
--             shard of the map); version  the map version this makes
-- Returns:    nothing.
-- Raises:     nothing.
-- Tables:     as _cluster_store (the current map with the range cut out of its ranges and given).
CREATE OR REPLACE FUNCTION pglogq._cluster_give(slot_lo integer, slot_hi integer, shard_name text, version bigint)
RETURNS void LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    cur jsonb := pglogq._cluster_canon(NULL);
    ranges jsonb;
BEGIN
    WITH r AS (
        SELECT (e ->> 'lo')::integer AS lo, (e ->> 'hi')::integer AS hi, e ->> 'shard' AS shard
          FROM jsonb_array_elements(cur -> 'ranges') e
    ), pieces AS (
        SELECT r.lo, least(r.hi, _cluster_give.slot_lo - 1) AS hi, r.shard FROM r WHERE r.lo < _cluster_give.slot_lo
        UNION ALL
        SELECT greatest(r.lo, _cluster_give.slot_hi + 1), r.hi, r.shard FROM r WHERE r.hi > _cluster_give.slot_hi
        UNION ALL
        SELECT _cluster_give.slot_lo, _cluster_give.slot_hi, _cluster_give.shard_name
    )
    SELECT jsonb_agg(jsonb_build_object('lo', p.lo, 'hi', p.hi, 'shard', p.shard) ORDER BY p.lo) INTO ranges
      FROM pieces p;
    PERFORM pglogq._cluster_store(jsonb_build_object('shards', cur -> 'shards', 'ranges', ranges), version);
END $$;
