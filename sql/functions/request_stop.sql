-- pglogq.request_stop(queue_name, msg_id): ask the handler running an event to stop.
-- Parameters: queue_name; msg_id  an id returned by send/send_batch on that queue
-- Returns:    true when some consumer's handler has started on the event and its page is not
--             acknowledged yet (the request is recorded: handlers see it through
--             stop_requests(), the consumer runtime as msg.cancel_requested); false when no
--             handler runs it (not started yet: use cancel; done; or no longer stored).
-- Raises:     PQ001 unknown queue; PQ021 msg_id was never issued by this queue.
-- Tables:     stop_request (insert), subscription, tick, event (read).
-- The request is advice to a cooperating handler: nothing is interrupted, and what the handler
-- does (return early, so that the event is acknowledged; or fail it) decides its outcome.  It
-- lasts until maintenance prunes it, after the event is gone from every page.
CREATE OR REPLACE FUNCTION pglogq.request_stop(queue_name text, msg_id bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    IF msg_id IS NULL OR msg_id < 1 OR msg_id > coalesce(pg_sequence_last_value(q.event_seq), 0) THEN
        RAISE EXCEPTION 'unknown message % on queue "%"', coalesce(msg_id::text, 'NULL'), q.queue_name
            USING ERRCODE = 'PQ021', HINT = 'this queue has never issued that id';
    END IF;
    IF NOT pglogq._running(q.queue_id, msg_id) THEN
        RETURN false;
    END IF;
    INSERT INTO pglogq.stop_request (queue_id, msg_id) VALUES (q.queue_id, request_stop.msg_id)
    ON CONFLICT DO NOTHING;
    RETURN true;
END $$;
