-- pglogq._cluster_route(keys): refuse keyed events this shard does not own (a sharded queue).
-- Parameters: keys  the events' keys (checked by _check_keys)
-- Returns:    nothing (void) when this shard owns the slot of every key, or is no cluster member.
-- Raises:     PQ078 moved: the slot of a key is owned by another shard (the message names the
--             slot, the owner and the map version; DETAIL is the JSON {"slot", "shard",
--             "version"}); also when the transaction's snapshot predates a change of the map
--             (REPEATABLE READ or SERIALIZABLE: the epoch, set outside transactions by every
--             change of this shard's slots (an export or an import, a join, an apply that takes
--             slots away or gives some), is above the map version the snapshot shows; DETAIL {"slot": null,
--             "shard": null, "version": the epoch}, HINT "retry the transaction").
-- Tables:     cluster_node, cluster_slots (read), cluster_epoch (last value).
-- Called by the sends on a sharded queue with keys only, after the queue name's lock is held:
-- an export (which takes that lock exclusively) is either over and seen, or waits for the
-- caller's transaction.
CREATE OR REPLACE FUNCTION pglogq._cluster_route(keys text[])
RETURNS void LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
    ep bigint;
    bad integer;
    owner text;
BEGIN
    SELECT * INTO n FROM pglogq.cluster_node;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        ep := coalesce(pg_sequence_last_value('pglogq.cluster_epoch'), 0);
        IF ep > n.map_version THEN
            RAISE EXCEPTION 'the shard map changed after this transaction''s snapshot was taken (map version % in the snapshot, % now)',
                n.map_version, ep
                USING ERRCODE = 'PQ078',
                      DETAIL = jsonb_build_object('slot', NULL, 'shard', NULL, 'version', ep)::text,
                      HINT = 'retry the transaction';
        END IF;
    END IF;
    SELECT s INTO bad FROM (SELECT pglogq.key_slot(k) AS s FROM unnest(keys) k) x
     WHERE NOT EXISTS (SELECT 1 FROM pglogq.cluster_slots c
                        WHERE c.shard_name = n.shard_name AND x.s BETWEEN c.slot_lo AND c.slot_hi)
     LIMIT 1;
    IF bad IS NOT NULL THEN
        owner := pglogq._cluster_owner(bad);
        RAISE EXCEPTION 'moved: key slot % belongs to shard "%" (map version %), not to this shard "%"',
            bad, owner, n.map_version, n.shard_name
            USING ERRCODE = 'PQ078',
                  DETAIL = jsonb_build_object('slot', bad, 'shard', owner, 'version', n.map_version)::text,
                  HINT = 'send it to that shard: pglogq.cluster_map() gives the map and the shards'' DSNs';
    END IF;
END $$;
