-- pglogq.cluster_export(move): on the source shard of a move, give the slots away.
-- Parameters: move  the move cluster_import recorded on the target (see _cluster_move_of):
--             from_shard is this shard, map_version this shard's version + 1, the slots all
--             this shard's
-- Returns:    true if the slots were given away; false when this move was exported already
--             (same content: a repeated call changes nothing).
-- Raises:     PQ082 not a cluster member; PQ081 invalid move, this shard is not its source,
--             slots not all this shard's, overlapping an unfinished move, or a move of that id
--             with another content; PQ080 the move's version is not this shard's + 1; PQ014 not
--             in READ COMMITTED; 40P01 a deadlock with a transaction that sent to a sharded
--             queue and then to another (retry the export).
-- Tables:     queue (read), cluster_slots, cluster_node (the slots are to_shard's from the move's
--             version on), cluster_move (insert, state exported), cluster_epoch (set to the
--             move's version).
-- Locks: every sharded queue's name lock exclusively (_cluster_lock_queues): it waits for every
-- transaction that is sending to one of them, and sends wait for it.  When it has committed, a
-- keyed send of a moved slot here is refused with PQ078 (a REPEATABLE READ transaction whose
-- snapshot is older notices it through the epoch).  Then, in a later transaction,
-- cluster_fence(move_id) records each queue's fence.
CREATE OR REPLACE FUNCTION pglogq.cluster_export(move jsonb)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
    m pglogq.cluster_move;
    old pglogq.cluster_move;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'cluster_export must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.cluster'));
    n := pglogq._cluster_node();
    m := pglogq._cluster_move_of(move, n);
    SELECT * INTO old FROM pglogq.cluster_move x WHERE x.move_id = m.move_id;
    IF FOUND THEN
        IF (old.map_version, old.slot_lo, old.slot_hi, old.from_shard, old.to_shard)
           = (m.map_version, m.slot_lo, m.slot_hi, m.from_shard, m.to_shard) AND old.from_shard = n.shard_name THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'invalid move: move % exists on this shard with another content', old.move_id
            USING ERRCODE = 'PQ081';
    END IF;
    IF m.from_shard <> n.shard_name THEN
        RAISE EXCEPTION 'invalid move: its source is "%", this shard is "%"', m.from_shard, n.shard_name
            USING ERRCODE = 'PQ081';
    END IF;
    PERFORM pglogq._cluster_check_move(m, n);
    PERFORM pglogq._cluster_lock_queues();
    PERFORM setval('pglogq.cluster_epoch', greatest(m.map_version, coalesce(pg_sequence_last_value('pglogq.cluster_epoch'), 0)));
    PERFORM pglogq._cluster_give(m.slot_lo, m.slot_hi, m.to_shard, m.map_version);
    INSERT INTO pglogq.cluster_move (move_id, map_version, slot_lo, slot_hi, from_shard, to_shard, state, exported_txid)
    VALUES (m.move_id, m.map_version, m.slot_lo, m.slot_hi, m.from_shard, m.to_shard, 'exported', pg_current_xact_id());
    RETURN true;
END $$;
