-- pglogq.mark_started(batch_id, msg_id, msg_txid, back): record that handlers start on the events
-- of the page up to msg_id (the one owner of the handler-start frontier after receive).
-- Parameters: batch_id  from receive (called with start_first, so that the caller marks starts);
--             msg_id, msg_txid  an event of the page receive returned last (msg_txid optional,
--             it makes the lookup O(1)); back  false (default): handlers start on every event
--             of the page up to and including msg_id, now; true: the caller marked more than it
--             started, handlers have started only up to msg_id (NULL msg_id: on none of the page)
--             and cancel may take the others again
-- Returns:    the ids of events newly marked that were cancelled before this call (never start
--             them; the ack of the page covers them); empty when none; NULL when the batch is no
--             longer its holder's (acknowledged, or taken over): stop handling it.
-- Raises:     PQ008 unknown batch id; PQ010 msg_id is not in the page receive returned last;
--             PQ061 back names an event after the frontier (nothing was marked that far).
-- Tables:     sub_state (update of the holder: started_*, heartbeat), event, cancelled, queue (read).
-- A race with cancel() has exactly one winner: both lock the holder's row (cancel FOR SHARE,
-- here FOR NO KEY UPDATE), and each looks at the other's committed result after its lock: a
-- cancellation committed first is returned here, a frontier committed first makes cancel
-- return false, and a cancellation still uncommitted is refused at its COMMIT (PQ035).
-- For a page received with start_first NULL every event counts as started already: the call
-- then changes nothing and returns an empty array.
-- Plans: the queue's copy (_queue_functions) answers when it exists, as in nack (why: its
-- header).  Without one: custom (plan_cache_mode), so that each read of the event and tick
-- tables is planned with the queue's id and reads and locks that queue's partitions only (after
-- five calls a generic plan was chosen, which covers and locks every queue's partitions: cost
-- and locks grew with the number of queues).
CREATE OR REPLACE FUNCTION pglogq.mark_started(
    batch_id bigint, msg_id bigint, msg_txid xid8 DEFAULT NULL, back boolean DEFAULT false)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    h pglogq.subscription;
    h2 pglogq.subscription;
    owner integer;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    e pglogq.event;
    lo xid8;
    hi xid8;
    gone bigint[];
    copy_of integer;
BEGIN
    -- queue copy: from here
    -- the queue's own copy of this function (_queue_functions), whose cached generic plans read
    -- and lock its tables only; none (no batch, or no copy yet): the body below says what
    SELECT s.queue_id INTO copy_of FROM pglogq.subscription s WHERE s.batch_id = mark_started.batch_id;
    IF copy_of IS NOT NULL
       AND to_regproc(format('pglogq.%I', '_q' || copy_of || '_@copies@_mark_started')) IS NOT NULL THEN
        EXECUTE format('SELECT pglogq.%I($1, $2, $3, $4)', '_q' || copy_of || '_@copies@_mark_started')
           INTO gone USING batch_id, msg_id, msg_txid, back;
        RETURN gone;
    END IF;
    -- queue copy: to here
    h := pglogq._holder(batch_id, false);
    IF h.sub_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF h.page_end_txid IS NULL OR (msg_id IS NULL AND NOT coalesce(back, false)) THEN
        RAISE EXCEPTION 'message % is not in the page of batch % that receive returned',
            coalesce(msg_id::text, 'NULL'), batch_id USING ERRCODE = 'PQ010';
    END IF;
    IF NOT h.page_marks THEN
        RETURN '{}';  -- received with start_first NULL: all of the page counts as started
    END IF;
    IF back AND msg_id IS NULL THEN
        UPDATE pglogq.sub_state s
           SET started_prio = NULL, started_txid = NULL, started_id = NULL,
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp(), released_at = NULL
         WHERE s.sub_id = h.sub_id;
        RETURN '{}';
    END IF;
    owner := coalesce(h.parent_id, h.sub_id);
    SELECT t.tick_snapshot INTO prev_snap FROM pglogq.tick t
     WHERE t.queue_id = h.queue_id AND t.tick_id = h.batch_prev_tick;
    SELECT t.tick_snapshot INTO cur_snap FROM pglogq.tick t
     WHERE t.queue_id = h.queue_id AND t.tick_id = h.batch_cur_tick;
    lo := pg_snapshot_xmin(prev_snap);
    hi := pg_snapshot_xmax(cur_snap);
    IF msg_txid IS NOT NULL THEN
        lo := greatest(lo, msg_txid);
        hi := least(hi, msg_txid);
    END IF;
    SELECT * INTO e FROM pglogq.event x
     WHERE x.ev_queue = h.queue_id AND x.ev_id = mark_started.msg_id
       AND x.ev_txid >= lo AND x.ev_txid <= hi
       AND pg_visible_in_snapshot(x.ev_txid, cur_snap) AND NOT pg_visible_in_snapshot(x.ev_txid, prev_snap)
       AND (x.ev_owner IS NULL OR x.ev_owner = owner)
       -- the holder's stream only (as in nack): a partition's, the urgent lane's, or the rest
       AND CASE WHEN coalesce(h.stream, h.lease_stream) IS NULL
                THEN x.ev_priority <= 100
                     OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id)
                WHEN coalesce(h.stream, h.lease_stream) = -1 THEN x.ev_priority > 100
                WHEN coalesce(h.stream, h.lease_stream) <= -2 THEN x.ev_id % 8 = -2 - coalesce(h.stream, h.lease_stream)
                                         AND (x.ev_priority <= 100
                                              OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id))
                ELSE x.ev_partition = coalesce(h.stream, h.lease_stream) END
       AND pglogq._page_position(h, x.ev_priority, x.ev_txid, x.ev_id) = 0
     LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % is not in the page of batch % that receive returned', msg_id, batch_id
            USING ERRCODE = 'PQ010';
    END IF;
    IF back THEN
        IF pglogq._page_position(h, e.ev_priority, e.ev_txid, e.ev_id, true) <> 0 THEN
            RAISE EXCEPTION 'message % of batch % is after the start frontier: it cannot be marked back to',
                msg_id, batch_id USING ERRCODE = 'PQ061';
        END IF;
        gone := '{}';
    ELSIF pglogq._page_position(h, e.ev_priority, e.ev_txid, e.ev_id, true) = 0 THEN
        RETURN '{}';  -- marked already
    ELSE
        -- cancellations of the events between the old frontier and this event
        h2 := h;
        h2.page_txid := NULL;
        h2.started_prio := e.ev_priority;
        h2.started_txid := e.ev_txid;
        h2.started_id := e.ev_id;
        gone := ARRAY(
            SELECT c.msg_id FROM pglogq.cancelled c
              JOIN pglogq.event x ON x.ev_queue = c.queue_id AND x.ev_txid = c.ev_txid AND x.ev_id = c.msg_id
             WHERE c.queue_id = h.queue_id AND x.ev_owner IS NULL
               AND CASE WHEN coalesce(h.stream, h.lease_stream) IS NULL
                        THEN x.ev_priority <= 100
                             OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id)
                        WHEN coalesce(h.stream, h.lease_stream) = -1 THEN x.ev_priority > 100
                        WHEN coalesce(h.stream, h.lease_stream) <= -2 THEN x.ev_id % 8 = -2 - coalesce(h.stream, h.lease_stream)
                                                 AND (x.ev_priority <= 100
                                                      OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id))
                        ELSE x.ev_partition = coalesce(h.stream, h.lease_stream) END
               -- the batch's transaction range (the txid index): never every marker of the queue
               AND c.ev_txid >= pg_snapshot_xmin(prev_snap) AND c.ev_txid < pg_snapshot_xmax(cur_snap)
               AND pg_visible_in_snapshot(x.ev_txid, cur_snap) AND NOT pg_visible_in_snapshot(x.ev_txid, prev_snap)
               AND pglogq._page_position(h, x.ev_priority, x.ev_txid, x.ev_id, true) = 1
               AND pglogq._page_position(h2, x.ev_priority, x.ev_txid, x.ev_id, true) = 0
             ORDER BY c.msg_id);
    END IF;
    UPDATE pglogq.sub_state s
       SET started_prio = e.ev_priority, started_txid = e.ev_txid, started_id = e.ev_id,
           heartbeat_at = clock_timestamp(), last_seen = clock_timestamp(), released_at = NULL
     WHERE s.sub_id = h.sub_id;
    RETURN gone;
END $$;
