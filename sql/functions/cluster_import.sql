-- pglogq.cluster_import(move): on the target shard of a move, take the slots over.
-- Parameters: move  {"move_id", "map_version", "slot_lo", "slot_hi", "from_shard", "to_shard"}
--             (see _cluster_move_of): to_shard is this shard, map_version this shard's
--             version + 1, the slots all owned by from_shard
-- Returns:    true if the move was recorded; false when this move was imported already (same
--             content: a repeated call changes nothing).
-- Raises:     PQ082 not a cluster member; PQ081 invalid move, this shard is not its target,
--             slots not all of from_shard, overlapping an unfinished move, or a move of that id
--             with another content; PQ080 the move's version is not this shard's + 1.
-- Tables:     cluster_move (insert, state importing), cluster_slots, cluster_node (the slots are
--             this shard's from the move's version on), cluster_gate (one row per consumer of
--             every sharded queue: none may receive here before it finished the source up to
--             the move's fence), subscriber (read), cluster_epoch (set to the move's version).
-- From here on this shard accepts the moved keys; the source still does until its export: the
-- orchestrator exports next (pglogq cluster move-slots).
CREATE OR REPLACE FUNCTION pglogq.cluster_import(move jsonb)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
    m pglogq.cluster_move;
    old pglogq.cluster_move;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.cluster'));
    n := pglogq._cluster_node();
    m := pglogq._cluster_move_of(move, n);
    SELECT * INTO old FROM pglogq.cluster_move x WHERE x.move_id = m.move_id;
    IF FOUND THEN
        IF (old.map_version, old.slot_lo, old.slot_hi, old.from_shard, old.to_shard)
           = (m.map_version, m.slot_lo, m.slot_hi, m.from_shard, m.to_shard) AND old.to_shard = n.shard_name THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'invalid move: move % exists on this shard with another content', old.move_id
            USING ERRCODE = 'PQ081';
    END IF;
    IF m.to_shard <> n.shard_name THEN
        RAISE EXCEPTION 'invalid move: its target is "%", this shard is "%"', m.to_shard, n.shard_name
            USING ERRCODE = 'PQ081';
    END IF;
    PERFORM pglogq._cluster_check_move(m, n);
    PERFORM pglogq._cluster_give(m.slot_lo, m.slot_hi, n.shard_name, m.map_version);
    INSERT INTO pglogq.cluster_move (move_id, map_version, slot_lo, slot_hi, from_shard, to_shard, state)
    VALUES (m.move_id, m.map_version, m.slot_lo, m.slot_hi, m.from_shard, m.to_shard, 'importing');
    INSERT INTO pglogq.cluster_gate (move_id, queue_id, sub_id)
    SELECT m.move_id, s.queue_id, s.sub_id
      FROM pglogq.subscriber s JOIN pglogq.queue q ON q.queue_id = s.queue_id
     WHERE s.parent_id IS NULL AND q.sharded;
    -- slots taken in change this shard's map as slots given away do: a REPEATABLE READ
    -- transaction whose snapshot is older still sees them as from_shard's, and must be told to
    -- retry (_cluster_route), not sent to from_shard, which gives them away next.  Set last:
    -- setval is not undone by a rollback.
    PERFORM setval('pglogq.cluster_epoch', greatest(m.map_version, coalesce(pg_sequence_last_value('pglogq.cluster_epoch'), 0)));
    RETURN true;
END $$;
