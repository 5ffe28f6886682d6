-- pglogq._subscription_update(): INSTEAD OF UPDATE trigger of the view pglogq.subscription.
-- Parameters: none (trigger: OLD, NEW).
-- Returns:    NEW.
-- Raises:     0A000 when an identity column (sub_id, queue, names, parent, created_at, stream, share) would change:
--             the identity row (pglogq.subscriber) is never updated.
-- Tables:     sub_state (update of the row's state columns).
-- For an administrator's UPDATE of the view (and the tests); the functions update pglogq.sub_state
-- directly.
CREATE OR REPLACE FUNCTION pglogq._subscription_update()
RETURNS trigger LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF (NEW.sub_id, NEW.queue_id, NEW.consumer_name, NEW.parent_id, NEW.worker_name, NEW.created_at, NEW.stream,
        NEW.share)
       IS DISTINCT FROM (OLD.sub_id, OLD.queue_id, OLD.consumer_name, OLD.parent_id, OLD.worker_name, OLD.created_at,
                         OLD.stream, OLD.share) THEN
        RAISE EXCEPTION 'the identity of a subscription is never updated' USING ERRCODE = '0A000';
    END IF;
    UPDATE pglogq.sub_state st
       SET last_tick = NEW.last_tick, last_seen = NEW.last_seen, heartbeat_at = NEW.heartbeat_at,
           batch_id = NEW.batch_id, batch_prev_tick = NEW.batch_prev_tick, batch_cur_tick = NEW.batch_cur_tick,
           batch_big = NEW.batch_big, batch_started_at = NEW.batch_started_at, page_prio = NEW.page_prio,
           page_txid = NEW.page_txid, page_id = NEW.page_id, page_end_prio = NEW.page_end_prio,
           page_end_txid = NEW.page_end_txid, page_end_id = NEW.page_end_id, page_more = NEW.page_more,
           skipped_events = NEW.skipped_events, skipped_at = NEW.skipped_at, handed_from = NEW.handed_from,
           page_marks = NEW.page_marks, started_prio = NEW.started_prio, started_txid = NEW.started_txid,
           started_id = NEW.started_id, suspect_prio = NEW.suspect_prio, suspect_txid = NEW.suspect_txid,
           suspect_id = NEW.suspect_id, released_at = NEW.released_at, lease_worker = NEW.lease_worker,
           hold_txid = NEW.hold_txid, hold_id = NEW.hold_id, hold_until = NEW.hold_until,
           lease_end_prio = NEW.lease_end_prio, lease_end_txid = NEW.lease_end_txid, lease_end_id = NEW.lease_end_id,
           lease_stream = NEW.lease_stream, lease_seq = NEW.lease_seq, share_handed = NEW.share_handed,
           share_window = NEW.share_window
     WHERE st.sub_id = OLD.sub_id;
    RETURN NEW;
END $$;
