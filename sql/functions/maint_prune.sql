-- pglogq.maint_prune(queue_name): remove what no consumer can need any more.
-- Parameters: queue_name
-- Returns:    the number of rows removed.
-- Raises:     PQ001 unknown queue.
-- Tables:     idempotency_key, cancelled, stop_request, progress, subscriber (delete of
--             silent workers, cascades to sub_state).
-- Cancel markers: those below the oldest stored transaction of the queue, read as a range of the
-- markers' (queue_id, ev_txid) index, so a pass costs the markers it deletes, not all of them
-- (custom plans: the range is planned with its bound, never as a guessed third of the table).
-- Deletes no tick: ticks are emptied with their rotated slot by maint_rotate_meta.
-- Does nothing (returns 0) while a seek or subscribe of the queue is in progress or another
-- prune or rotation of the queue runs; deletes no cancel marker in a transaction above READ
-- COMMITTED (its snapshot could miss a row written since).
CREATE OR REPLACE FUNCTION pglogq.maint_prune(queue_name text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
    fresh boolean;
    oldest xid8;  -- the oldest transaction of an event the queue still stores
    n integer;
    total integer := 0;
BEGIN
    q := pglogq._queue(queue_name);
    -- exclusive against seek and subscribe (they hold it shared while they set a cursor), and
    -- against another prune or rotation of this queue; never waits, so two sessions pruning
    -- queues in opposite orders cannot deadlock
    IF NOT pg_try_advisory_xact_lock(hashtext('pglogq.cursor'), q.queue_id) THEN
        RETURN 0;
    END IF;
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = q.queue_id;  -- after the lock
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    fresh := current_setting('transaction_isolation') = 'read committed';
    IF NOT fresh THEN
        RAISE WARNING 'prune of queue "%" deletes no cancel marker: it must run in a READ COMMITTED transaction, not %',
            q.queue_name, upper(current_setting('transaction_isolation'));
    END IF;
    DELETE FROM pglogq.idempotency_key k
     WHERE k.queue_id = q.queue_id AND k.created_at < now() - q.idempotency_window;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    -- cancel markers (a separate statement: its rule belongs to cancel): a cancellation lasts as
    -- long as its event row, i.e. until rotation truncated the event's table.  The markers whose
    -- event is surely gone are those below the oldest transaction the queue still stores (its
    -- min through the (ev_txid, ev_id) index of each child): one range of the markers' txid
    -- index, never a check of every marker against the event tables each pass.  A marker whose
    -- event went while an older transaction's event is still stored waits until that one goes.
    -- The bound is also kept below this statement's xmin: a transaction still running now (its
    -- events not visible to the min) could commit an event, and a cancel of it, before the
    -- DELETE's own snapshot; every txid below xmin has ended, so its events are in the min.
    oldest := least((SELECT min(e.ev_txid) FROM pglogq.event e WHERE e.ev_queue = q.queue_id),
                    pg_snapshot_xmin(pg_current_snapshot()));
    DELETE FROM pglogq.cancelled c
     WHERE fresh AND c.queue_id = q.queue_id AND c.ev_txid < oldest
       AND NOT EXISTS (SELECT 1 FROM pglogq.delayed d WHERE d.queue_id = c.queue_id AND d.msg_id = c.msg_id
                       OFFSET 0);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    -- stop requests whose event no handler runs any more
    DELETE FROM pglogq.stop_request r
     WHERE r.queue_id = q.queue_id AND r.requested_at < now() - interval '1 minute'
       AND NOT pglogq._running(r.queue_id, r.msg_id);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM pglogq.progress p USING pglogq.subscription s
     WHERE s.sub_id = p.sub_id AND s.queue_id = q.queue_id AND s.batch_id IS DISTINCT FROM p.batch_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    -- workers gone for a day, with no batch (never the stream of a partition: it holds a cursor)
    DELETE FROM pglogq.subscriber w
     WHERE w.sub_id IN (SELECT s.sub_id FROM pglogq.subscription s
                         WHERE s.queue_id = q.queue_id AND s.parent_id IS NOT NULL AND s.batch_id IS NULL
                           AND s.stream IS NULL
                           AND s.last_seen < now() - interval '1 day');
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN total + n;
END $$;
