-- pglogq._cancel_recheck(): trigger function; at COMMIT, refuse a cancellation whose event a
-- consumer was handed after cancel() checked.
-- Parameters: none (trigger cancelled_recheck on pglogq.cancelled, made by sql/triggers.sql:
--             AFTER INSERT, deferred to COMMIT).
-- Returns:    NULL.
-- Raises:     PQ035 a consumer was handed the event before the cancelling transaction committed.
-- Tables:     subscription (FOR SHARE on the queue's rows, held only while the transaction
--             commits), cancelled, event, tick, handed_run (read).
-- SECURITY DEFINER: a deferred trigger runs at COMMIT as the session's role (a pglogq_writer
-- login may not read the subscriptions), not as cancel()'s owner.
-- cancel() holds no lock after it returns, so that a producer's open transaction never blocks a
-- consumer.  The locks taken here wait for receives running at COMMIT; a receive starting later
-- waits for the COMMIT and then sees the cancellation.
-- The event is probed in the queue's own table (pglogq.event_<queue id>, a dynamic statement):
-- a cached probe of the shared parent went generic after five cancels in a session, and a
-- generic plan cannot prune the parent at plan time, so it locked every queue's event
-- partitions at each COMMIT (the sixth cancel of a session ran out of the lock table at 1,000
-- queues); a custom plan of it costs the parent's partition list, 0.5 ms a call at 1,000 queues.
CREATE OR REPLACE FUNCTION pglogq._cancel_recheck()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    e pglogq.event;
BEGIN
    PERFORM 1 FROM pglogq.subscription s WHERE s.queue_id = NEW.queue_id AND s.parent_id IS NOT NULL
     ORDER BY s.sub_id FOR SHARE;
    PERFORM 1 FROM pglogq.subscription s WHERE s.queue_id = NEW.queue_id AND s.parent_id IS NULL
     ORDER BY s.sub_id FOR SHARE;
    IF NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                    WHERE c.queue_id = NEW.queue_id AND c.msg_id = NEW.msg_id AND c.ev_txid = NEW.ev_txid) THEN
        RETURN NULL;  -- removed again in the same transaction (the queue was dropped)
    END IF;
    IF to_regclass(format('pglogq.%I', 'event_' || NEW.queue_id)) IS NULL THEN
        RETURN NULL;  -- the queue's tables are gone: nothing to hand out
    END IF;
    EXECUTE format('SELECT * FROM pglogq.%I x WHERE x.ev_txid = $1 AND x.ev_id = $2 AND x.ev_owner IS NULL LIMIT 1',
                   'event_' || NEW.queue_id)
       INTO e USING NEW.ev_txid, NEW.msg_id;
    IF e.ev_id IS NOT NULL AND pglogq._cancel_handed(e.ev_queue, e.ev_txid, e.ev_id, e.ev_priority, e.ev_partition) THEN
        RAISE EXCEPTION 'cannot cancel message % on queue "%": a consumer was handed it before the cancelling transaction committed',
            NEW.msg_id, (SELECT x.queue_name FROM pglogq.queue x WHERE x.queue_id = NEW.queue_id)
            USING ERRCODE = 'PQ035',
                  HINT = 'the transaction is rolled back and the event is delivered; cancel in a short transaction, '
                         'or retry (cancel then returns false)';
    END IF;
    RETURN NULL;
END $$;
