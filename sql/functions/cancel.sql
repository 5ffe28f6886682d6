-- pglogq.cancel(queue_name, msg_id): withdraw an event on which no consumer's handler has started.
-- Parameters: queue_name; msg_id  an id returned by send/send_batch on that queue
-- Returns:    true when the event will never be delivered: a delayed event not yet due (its row
--             is deleted), or an event in the log on which no handler has started (it is
--             recorded in pglogq.cancelled, receive, mark_started and every replay skip it, and
--             the record lasts as long as the event is stored) - also when it is in a page a
--             consumer has received already, if that consumer marks its starts (receive with
--             start_first, as the consumer runtime does).  false when a handler of some
--             consumer has started on it (or it was retried, dead-lettered or cancelled before,
--             or a worker crashed on it), or when nothing with
--             that id is stored any more (rolled back, or rotated away), or when it was sent by
--             another transaction that has not committed.
-- Raises:     PQ001 unknown queue; PQ021 msg_id was never issued by this queue;
--             PQ035 (at COMMIT of the calling transaction) a consumer was handed the event
--             after cancel returned true and before that transaction committed: the whole
--             transaction is rolled back and the event is delivered normally.
-- Tables:     delayed (delete), event, subscription, tick, handed_run, retry, dead_letter (read),
--             cancelled (insert).
-- Handed (started): the event is in a page receive returned to the consumer (or one of its
-- workers) up to the page's start frontier (all of the page for a receiver that does not mark
-- starts, what mark_started marked otherwise), or it was acknowledged, or a handler crashed on it.  A cursor that moved past the event without receiving it (a consumer
-- subscribed after it was ticked, a seek forward, a retention skip) does not count; an event
-- received once stays handed after a seek back; the unreturned part of a batch dropped by seek
-- or retention counts as handed.  Consumers that were unsubscribed do not count.
-- Locks: none held after the call.  It waits for a receive that is running right now (it locks
-- the queue's subscription rows FOR SHARE in a subtransaction it then rolls back), so its answer
-- covers every receive committed before it; a receive in the window between the call and the
-- caller's COMMIT does not wait and does not see the uncommitted cancellation, so the check is
-- repeated at COMMIT (a deferred trigger on pglogq.cancelled) and fails with PQ035 if that
-- receive handed the event.
-- Plans: the queue's copy (_queue_functions) answers when it exists, with generic plans cached
-- for the session over the queue's own event and tick tables (the custom plans of this body
-- cost ~2 ms of planning a call).  Without one: custom (plan_cache_mode), as in the helpers it
-- calls: planned with the queue's id, each read of the event and tick tables reads and locks
-- the queue's own partitions only (a generic plan covers every queue's: its cost and its locks
-- grew with the number of queues).
CREATE OR REPLACE FUNCTION pglogq.cancel(queue_name text, msg_id bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
    e pglogq.event;
    handed boolean;
    lo xid8;
BEGIN
    q := pglogq._queue(queue_name);
    -- queue copy: from here
    -- the queue's own copy of this function (_queue_functions), whose cached generic plans read
    -- and lock its tables only; none (the queue has not received since an install changed the
    -- functions): the body below, planned on every call
    IF to_regproc(format('pglogq.%I', '_q' || q.queue_id || '_@copies@_cancel')) IS NOT NULL THEN
        EXECUTE format('SELECT pglogq.%I($1, $2)', '_q' || q.queue_id || '_@copies@_cancel')
           INTO handed USING queue_name, msg_id;
        RETURN handed;
    END IF;
    -- queue copy: to here
    IF msg_id IS NULL OR msg_id < 1 OR msg_id > coalesce(pg_sequence_last_value(q.event_seq), 0) THEN
        RAISE EXCEPTION 'unknown message % on queue "%"', coalesce(msg_id::text, 'NULL'), q.queue_name
            USING ERRCODE = 'PQ021', HINT = 'this queue has never issued that id';
    END IF;
    -- a delayed event: still in the waiting room (the pump deletes it when it moves it)
    DELETE FROM pglogq.delayed d WHERE d.queue_id = q.queue_id AND d.msg_id = cancel.msg_id;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM pglogq.cancelled c WHERE c.queue_id = q.queue_id AND c.msg_id = cancel.msg_id) THEN
        RETURN false;
    END IF;
    lo := pglogq._event_txid_floor(q.queue_id, msg_id);
    -- retried, replayed or dead-lettered: it has been delivered
    IF EXISTS (SELECT 1 FROM pglogq.subscription s JOIN pglogq.retry r ON r.sub_id = s.sub_id
                WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL AND r.msg_id = cancel.msg_id)
       OR EXISTS (SELECT 1 FROM pglogq.subscription s JOIN pglogq.dead_letter d ON d.sub_id = s.sub_id
                   WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL AND d.msg_id = cancel.msg_id)
       OR EXISTS (SELECT 1 FROM pglogq.event x
                   WHERE x.ev_queue = q.queue_id AND x.ev_id = cancel.msg_id AND x.ev_owner IS NOT NULL
                     AND x.ev_txid >= lo) THEN
        RETURN false;
    END IF;
    SELECT * INTO e FROM pglogq.event x
     WHERE x.ev_queue = q.queue_id AND x.ev_id = cancel.msg_id AND x.ev_owner IS NULL
       AND x.ev_txid >= lo
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- wait for receives running now, check, and let the locks go again (rolled-back subtransaction)
    BEGIN
        PERFORM 1 FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NOT NULL
         ORDER BY s.sub_id FOR SHARE;
        PERFORM 1 FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL
         ORDER BY s.sub_id FOR SHARE;
        handed := pglogq._cancel_handed(q.queue_id, e.ev_txid, e.ev_id, e.ev_priority, e.ev_partition);
        RAISE EXCEPTION 'release the locks' USING ERRCODE = 'PQ039';
    EXCEPTION WHEN SQLSTATE 'PQ039' THEN
        NULL;
    END;
    IF handed THEN
        RETURN false;
    END IF;
    INSERT INTO pglogq.cancelled (queue_id, msg_id, ev_txid) VALUES (q.queue_id, e.ev_id, e.ev_txid)
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END $$;
