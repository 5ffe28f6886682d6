-- pglogq.maint_prune(queue_name): remove what no consumer can need any more.
-- Parameters: queue_name
-- Returns:    the number of rows removed.
-- Raises:     PQ001 unknown queue.
-- Tables:     tick, idempotency_key, cancelled, progress, subscription (delete).
-- Keeps every tick from the slowest consumer on, and before it one tick a minute back to the
-- oldest tick whose events are all still stored (retain_tick), so consumers can seek there.
CREATE OR REPLACE FUNCTION pglogq.maint_prune(queue_name text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    slow bigint;
    slow_snap pg_snapshot;
    keep_from bigint;
    n integer;
    total integer := 0;
BEGIN
    q := pglogq._queue(queue_name);
    slow := pglogq._slowest_tick(q.queue_id);
    SELECT max(t.tick_id) INTO keep_from FROM pglogq.tick t WHERE t.queue_id = q.queue_id;
    slow := coalesce(slow, keep_from);
    keep_from := least(coalesce(q.retain_tick, slow), slow);
    DELETE FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id < keep_from;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id > keep_from AND t.tick_id < slow
       AND t.tick_id NOT IN (SELECT min(x.tick_id) FROM pglogq.tick x
                              WHERE x.queue_id = q.queue_id AND x.tick_id > keep_from AND x.tick_id < slow
                              GROUP BY date_trunc('minute', x.tick_time));
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM pglogq.idempotency_key k
     WHERE k.queue_id = q.queue_id AND k.created_at < now() - q.idempotency_window;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    SELECT t.tick_snapshot INTO slow_snap FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = slow;
    -- a cancellation lasts as long as its event row: until rotation truncated the event's table
    DELETE FROM pglogq.cancelled c
     WHERE c.queue_id = q.queue_id
       AND NOT EXISTS (SELECT 1 FROM pglogq.event e
                        WHERE e.ev_queue = c.queue_id AND e.ev_txid = c.ev_txid AND e.ev_id = c.msg_id)
       AND NOT EXISTS (SELECT 1 FROM pglogq.delayed d WHERE d.queue_id = c.queue_id AND d.msg_id = c.msg_id);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM pglogq.progress p USING pglogq.subscription s
     WHERE s.sub_id = p.sub_id AND s.queue_id = q.queue_id AND s.batch_id IS DISTINCT FROM p.batch_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    -- workers gone for a day, with no batch
    DELETE FROM pglogq.subscription s
     WHERE s.queue_id = q.queue_id AND s.parent_id IS NOT NULL AND s.batch_id IS NULL
       AND s.last_seen < now() - interval '1 day';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN total + n;
END $$;
