-- pglogq.subscribe(queue_name, consumer_name, share, lanes): register a consumer; it gets events sent from now on.
-- Parameters: queue_name; consumer_name  ASCII name, at most 63 bytes;
--             share  true: a share consumer, whose workers each take the next events of its
--             batches in leases (any idle worker takes the next event; see receive; on a
--             partitioned queue a lease is a partition's page, one at a time per partition; its
--             window: set_share_window, no limit by default), false (default): an ordinary
--             consumer, whose workers each take whole batches;
--             lanes  true (a share consumer of a queue with one partition): its workers cut their
--             leases on eight lanes side by side (events spread over them by id), instead of one
--             after another from one frontier: the throughput of many workers, hand-out order
--             kept within a lane only (see _consumer_streams); false (default): one order
-- Returns:    true if subscribed, false if it already was, in the same mode (nothing changed).
-- Raises:     PQ001 unknown queue; PQ004 invalid name; PQ003 the consumer exists in the other
--             mode (share, or lanes); PQ096 lanes asked for an ordinary consumer or on a
--             partitioned queue.
-- Tables:     subscriber and sub_state (insert), tick (read); on a sharded queue, cluster_gate
--             (a gate per unfinished import of this shard, see cluster_import).
-- On a partitioned queue the consumer gets one stream per partition too (subscriber rows with
-- parent_id and stream set), each with a cursor at the same tick: receive reads them; on a queue
-- with an urgent lane, the lane's stream (stream -1); with lanes, the eight lanes' streams
-- (_consumer_streams: the one owner of which streams a consumer has).
-- Locks: the queue name's advisory lock (shared, see _queue), then the registry lock.
-- Concurrency: racing subscribers of one name serialise on an advisory lock; one wins.
CREATE OR REPLACE FUNCTION pglogq.subscribe(queue_name text, consumer_name text, share boolean DEFAULT false,
                                            lanes boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    last bigint;
    snap pg_snapshot;
    new_id integer;
    was boolean;
    was_lanes boolean;
BEGIN
    PERFORM pglogq._check_name(consumer_name, 'consumer', 63);
    q := pglogq._queue(queue_name);
    IF coalesce(lanes, false) AND NOT coalesce(share, false) THEN
        RAISE EXCEPTION 'lanes are for share consumers: consumer "%" on queue "%" is subscribed as an ordinary one',
            subscribe.consumer_name, q.queue_name
            USING ERRCODE = 'PQ096', HINT = 'subscribe with share => true and lanes => true';
    END IF;
    IF coalesce(lanes, false) AND q.partitions > 1 THEN
        RAISE EXCEPTION 'queue "%" has % partitions: its partitions are the lanes of a share consumer already',
            q.queue_name, q.partitions
            USING ERRCODE = 'PQ096', HINT = 'subscribe without lanes';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    -- held until commit: maint_prune and rotation skip the queue while a cursor is being set
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.cursor'), q.queue_id);
    SELECT s.share, s.lanes INTO was, was_lanes FROM pglogq.subscriber s
     WHERE s.queue_id = q.queue_id AND s.consumer_name = subscribe.consumer_name AND s.parent_id IS NULL;
    IF FOUND THEN
        IF was_lanes <> coalesce(lanes, false) AND was = coalesce(share, false) THEN
            RAISE EXCEPTION 'share consumer "%" on queue "%" exists %', subscribe.consumer_name, q.queue_name,
                CASE WHEN was_lanes THEN 'with lanes' ELSE 'without lanes' END
                USING ERRCODE = 'PQ003',
                      HINT = 'a consumer keeps its mode: unsubscribe it first, or subscribe another name';
        END IF;
        IF was <> coalesce(share, false) THEN
            RAISE EXCEPTION 'consumer "%" on queue "%" exists as % consumer', subscribe.consumer_name, q.queue_name,
                CASE WHEN was THEN 'a share' ELSE 'an ordinary' END
                USING ERRCODE = 'PQ003',
                      HINT = 'a consumer keeps its mode: unsubscribe it first, or subscribe another name';
        END IF;
        RETURN false;
    END IF;
    -- the queue's own tick table: a read of the shared parent gets a generic plan after five
    -- calls of a session, which locks every queue's tick tables (a service subscribing per tenant)
    EXECUTE format('SELECT t.tick_id, t.tick_snapshot FROM pglogq.%I t ORDER BY t.tick_id DESC LIMIT 1',
                   'tick_' || q.queue_id)
       INTO last, snap;
    -- handed_from: the events already ticked were never handed to it (see pglogq.cancel)
    INSERT INTO pglogq.subscriber (queue_id, consumer_name, share, lanes)
    VALUES (q.queue_id, subscribe.consumer_name, coalesce(subscribe.share, false), coalesce(subscribe.lanes, false))
    RETURNING sub_id INTO new_id;
    INSERT INTO pglogq.sub_state (sub_id, last_tick, last_seen, handed_from)
    VALUES (new_id, last, now(), snap);
    WITH st AS (
        INSERT INTO pglogq.subscriber (queue_id, consumer_name, parent_id, stream)
        SELECT q.queue_id, subscribe.consumer_name, new_id, p
          FROM pglogq._consumer_streams(q, subscribe.lanes) p
        RETURNING sub_id
    )
    INSERT INTO pglogq.sub_state (sub_id, last_tick, handed_from)
    SELECT st.sub_id, last, snap FROM st;
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
