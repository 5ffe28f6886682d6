-- pglogq.cede(batch_id, keep_msg_id, keep_txid): a worker of a share consumer gives back the
-- events of its lease that it has not started, for any other worker to take at once.
-- Parameters: batch_id  the lease (from receive); keep_msg_id, keep_txid  the last event the
--             worker keeps: one of the page receive returned last, at or after the last event
--             counted as started; both NULL: keep nothing that is not acknowledged yet
-- Returns:    true; false when nothing of the lease follows the kept event (nothing to give).
-- Raises:     PQ008 unknown batch; PQ009 not the current batch of any holder (acknowledged,
--             taken over, ceded whole); PQ010 the kept event is not in the page; PQ092 the batch
--             is not a lease of a share consumer (a partition's page is not one: its events
--             after a started one must wait for it anyway), or an event after the kept one was counted as
--             started (receive without start_first counts the whole page as started at once).
-- Tables:     subscription (lock of the holder), subscriber and sub_state (a released holder row
--             for the ceded events: insert; the holder's lease end: update), event (read),
--             tick_head (read: the last tick, which the NOTIFY "pglogq.<queue>" carries).
-- The lease is cut after the kept event; the rest of it (in the page or after it) goes to a new
-- holder row that is released at once, so the next worker that asks takes it over (_take_batch:
-- the same path as a silent worker's lease, before any new event; nothing of it was started,
-- so no crash is counted) and idle workers are woken.  The worker's own page is acknowledged as
-- it was returned (ack with its last event), but its ceded events are no longer its own: their
-- start marks, nacks and progress reports are refused (page position 2).  So a runtime that
-- takes a lease of many events and cedes what it has not started when one event runs long
-- never holds events back behind a slow one, and no event runs twice.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq.cede(batch_id bigint, keep_msg_id bigint DEFAULT NULL,
                                       keep_txid xid8 DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    h pglogq.subscription;
    q pglogq.queue;
    keep_prio integer;
    new_batch bigint;
    new_id integer;
    whole boolean := keep_msg_id IS NULL AND keep_txid IS NULL;
BEGIN
    IF (keep_msg_id IS NULL) <> (keep_txid IS NULL) THEN
        RAISE EXCEPTION 'cede needs both keep_msg_id and keep_txid, or neither' USING ERRCODE = 'PQ019';
    END IF;
    h := pglogq._holder(batch_id);
    IF h.stream >= 0 THEN
        RAISE EXCEPTION 'batch % is the page of a partition: it is not ceded', batch_id
            USING ERRCODE = 'PQ092',
                  HINT = 'the events after a started one are the next of its partition''s keys, which wait for it; '
                         'acknowledge the page up to the started event instead';
    END IF;
    IF h.lease_end_txid IS NULL OR h.parent_id IS NULL THEN
        RAISE EXCEPTION 'batch % is not a lease of a share consumer: there is nothing to cede', batch_id
            USING ERRCODE = 'PQ092', HINT = 'only a worker of a share consumer (subscribe with share => true) holds leases';
    END IF;
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = h.queue_id;
    IF whole THEN
        IF h.started_txid IS NOT NULL THEN
            RAISE EXCEPTION 'events of batch % were counted as started: cede the events after the last started one',
                batch_id USING ERRCODE = 'PQ092';
        END IF;
    ELSE
        -- the kept event must be one of this batch (of its ticks, for this consumer)
        SELECT e.ev_priority INTO keep_prio
          FROM pglogq.event e, pglogq.tick tp, pglogq.tick tc
         WHERE e.ev_queue = h.queue_id AND e.ev_txid = keep_txid AND e.ev_id = keep_msg_id
           AND (e.ev_owner IS NULL OR e.ev_owner = h.parent_id)
           -- a lease cut from a lane (_consumer_streams): that lane's events only
           AND (h.lease_stream IS NULL OR h.lease_stream > -2
                OR (e.ev_id % 8 = -2 - h.lease_stream AND NOT (q.urgent_lane AND e.ev_priority > 100)))
           AND tp.queue_id = h.queue_id AND tp.tick_id = h.batch_prev_tick
           AND tc.queue_id = h.queue_id AND tc.tick_id = h.batch_cur_tick
           AND pg_visible_in_snapshot(e.ev_txid, tc.tick_snapshot)
           AND NOT pg_visible_in_snapshot(e.ev_txid, tp.tick_snapshot);
        IF NOT FOUND OR h.page_end_txid IS NULL
           OR pglogq._page_position(h, keep_prio, keep_txid, keep_msg_id) <> 0 THEN
            RAISE EXCEPTION 'message % is not in the page of batch % that receive returned last', keep_msg_id, batch_id
                USING ERRCODE = 'PQ010';
        END IF;
        IF h.started_txid IS NOT NULL AND (
               CASE WHEN h.batch_big THEN (h.started_txid, h.started_id) > (keep_txid, keep_msg_id)
                    ELSE (-h.started_prio, h.started_txid, h.started_id) > (-keep_prio, keep_txid, keep_msg_id) END) THEN
            RAISE EXCEPTION 'events of batch % after message % were counted as started: keep up to the last started one',
                batch_id, keep_msg_id USING ERRCODE = 'PQ092';
        END IF;
        IF (keep_txid, keep_msg_id) = (h.lease_end_txid, h.lease_end_id) THEN
            RETURN false;  -- the kept event ends the lease
        END IF;
    END IF;
    -- the ceded events: a released holder row of their own, from the kept event to the lease end
    new_batch := nextval('pglogq.batch_seq');
    INSERT INTO pglogq.subscriber (queue_id, consumer_name, parent_id, worker_name)
    VALUES (h.queue_id, h.consumer_name, h.parent_id, 'ceded.' || new_batch)
    RETURNING sub_id INTO new_id;
    INSERT INTO pglogq.sub_state (sub_id, last_seen, heartbeat_at, released_at, batch_id, batch_prev_tick,
                                  batch_cur_tick, batch_big, batch_started_at, page_prio, page_txid, page_id,
                                  lease_end_prio, lease_end_txid, lease_end_id, lease_stream, lease_seq)
    VALUES (new_id, clock_timestamp(), clock_timestamp(), clock_timestamp(), new_batch, h.batch_prev_tick,
            h.batch_cur_tick, h.batch_big, clock_timestamp(),
            CASE WHEN whole THEN h.page_prio ELSE keep_prio END,
            CASE WHEN whole THEN h.page_txid ELSE keep_txid END,
            CASE WHEN whole THEN h.page_id ELSE keep_msg_id END,
            h.lease_end_prio, h.lease_end_txid, h.lease_end_id, h.lease_stream, h.lease_seq);
    IF whole THEN
        PERFORM pglogq._close_batch(h.sub_id, true);
    ELSE
        UPDATE pglogq.sub_state s
           SET lease_end_prio = keep_prio, lease_end_txid = keep_txid, lease_end_id = keep_msg_id,
               -- the worker is alive: a release by maintenance is withdrawn, as by heartbeat
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp(), released_at = NULL
         WHERE s.sub_id = h.sub_id;
    END IF;
    PERFORM pg_notify('pglogq.' || q.queue_name,
                      (SELECT th.tick_id FROM pglogq.tick_head th WHERE th.queue_id = q.queue_id)::text);
    RETURN true;
END $$;
