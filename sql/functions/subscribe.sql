-- pglogq.subscribe(queue_name, consumer_name, share): register a consumer; it gets events sent from now on.
-- Parameters: queue_name; consumer_name  ASCII name, at most 63 bytes;
--             share  true: a share consumer, whose workers each take the next events of its
--             batches in leases (any idle worker takes the next event; see receive; on a
--             partitioned queue a lease is a partition's page, one at a time per partition; its
--             window: set_share_window, no limit by default), false (default): an ordinary
--             consumer, whose workers each take whole batches
-- Returns:    true if subscribed, false if it already was, in the same mode (nothing changed).
-- Raises:     PQ001 unknown queue; PQ004 invalid name; PQ003 the consumer exists in the other
--             mode.
-- Tables:     subscriber and sub_state (insert), tick (read); on a sharded queue, cluster_gate
--             (a gate per unfinished import of this shard, see cluster_import).
-- On a partitioned queue the consumer gets one stream per partition too (subscriber rows with
-- parent_id and stream set), each with a cursor at the same tick: receive reads them; on a queue
-- with an urgent lane, the lane's stream (stream -1).
-- Locks: the queue name's advisory lock (shared, see _queue), then the registry lock.
-- Concurrency: racing subscribers of one name serialise on an advisory lock; one wins.
CREATE OR REPLACE FUNCTION pglogq.subscribe(queue_name text, consumer_name text, share boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    last bigint;
    snap pg_snapshot;
    new_id integer;
    was boolean;
BEGIN
    PERFORM pglogq._check_name(consumer_name, 'consumer', 63);
    q := pglogq._queue(queue_name);
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    -- held until commit: maint_prune and rotation skip the queue while a cursor is being set
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.cursor'), q.queue_id);
    SELECT s.share INTO was FROM pglogq.subscription s
     WHERE s.queue_id = q.queue_id AND s.consumer_name = subscribe.consumer_name AND s.parent_id IS NULL;
    IF FOUND THEN
        IF was <> coalesce(share, false) THEN
            RAISE EXCEPTION 'consumer "%" on queue "%" exists as % consumer', subscribe.consumer_name, q.queue_name,
                CASE WHEN was THEN 'a share' ELSE 'an ordinary' END
                USING ERRCODE = 'PQ003',
                      HINT = 'a consumer keeps its mode: unsubscribe it first, or subscribe another name';
        END IF;
        RETURN false;
    END IF;
    SELECT t.tick_id, t.tick_snapshot INTO last, snap FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    -- handed_from: the events already ticked were never handed to it (see pglogq.cancel)
    INSERT INTO pglogq.subscriber (queue_id, consumer_name, share)
    VALUES (q.queue_id, subscribe.consumer_name, coalesce(subscribe.share, false))
    RETURNING sub_id INTO new_id;
    INSERT INTO pglogq.sub_state (sub_id, last_tick, last_seen, handed_from)
    VALUES (new_id, last, now(), snap);
    IF q.partitions > 1 OR q.urgent_lane THEN
        WITH st AS (
            INSERT INTO pglogq.subscriber (queue_id, consumer_name, parent_id, stream)
            SELECT q.queue_id, subscribe.consumer_name, new_id, p::smallint
              FROM generate_series(CASE WHEN q.urgent_lane THEN -1 ELSE 0 END,
                                   CASE WHEN q.partitions > 1 THEN q.partitions - 1 ELSE -1 END) p
            RETURNING sub_id
        )
        INSERT INTO pglogq.sub_state (sub_id, last_tick, handed_from)
        SELECT st.sub_id, last, snap FROM st;
    END IF;
    IF q.sharded THEN
        -- slots being imported here: the consumer may get their keys' events only after it
        -- finished the old shard up to the move's fence
        INSERT INTO pglogq.cluster_gate (move_id, queue_id, sub_id)
        SELECT m.move_id, q.queue_id, new_id
          FROM pglogq.cluster_move m JOIN pglogq.cluster_node n ON n.shard_name = m.to_shard
         WHERE m.state <> 'done';
    END IF;
    RETURN true;
END $$;
