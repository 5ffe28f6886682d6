-- pglogq.maint_operations(): the maintenance steps due now, for a ticker daemon to run.
-- Parameters: none.
-- Returns:    rows (op, queue_name): op is one of pump, meta and head (queue_name NULL: head,
--             the compaction of tick_head, right after meta, in a transaction of its own),
--             retention, rotate_step1, rotate_step2, prune, release, history (queue_name NULL);
--             run each with pglogq.maint_run(op, queue_name), each in its own transaction.
-- Tables:     queue, retry, delayed, subscription, cancelled, idempotency_key, stop_request,
--             progress (read).
-- The policy lives here, with the schema, so the daemon (or pg_cron) stays dumb.  Each test is
-- an index probe or a read of the queue rows: a pass costs the same with a million retries or
-- delayed sends waiting for tomorrow as with none.  PL/pgSQL, for its cached plan: as a SQL
-- function its one statement was planned on every call (6-8 ms of a 12 ms pass at 1,000 queues,
-- twice a second).
CREATE OR REPLACE FUNCTION pglogq.maint_operations()
RETURNS TABLE (op text, queue_name text) LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
BEGIN
    RETURN QUERY
    -- the earliest due time of each table: a min() the planner reads from the end of the
    -- due_at / deliver_at index whatever the statistics (an EXISTS of "due_at <= (subquery)" is
    -- estimated as a third of the table, and was a seq scan of every waiting row every pass)
    SELECT 'pump', NULL::text
     WHERE (SELECT min(r.due_at) FROM pglogq.retry r) <= clock_timestamp()
        OR (SELECT min(d.deliver_at) FROM pglogq.delayed d) <= clock_timestamp()
    UNION ALL
    SELECT m.op, NULL::text FROM (VALUES (1, 'meta'), (2, 'head')) m (i, op) WHERE pglogq._meta_due()
    UNION ALL
    SELECT 'history', NULL::text WHERE pglogq._history_due()
    UNION ALL
    SELECT 'retention', q.queue_name FROM pglogq.queue q WHERE q.max_consumer_lag > interval '0'
    UNION ALL
    SELECT 'rotate_step2', q.queue_name FROM pglogq.queue q WHERE q.switch_step2 IS NULL
    UNION ALL
    SELECT 'rotate_step1', q.queue_name FROM pglogq.queue q
     WHERE q.switch_step2 IS NOT NULL AND clock_timestamp() - q.switch_time >= q.rotation_period
    UNION ALL
    -- prune only where maint_prune has something to look at: cancel markers, idempotency keys
    -- older than the shortest window (their time index), stop requests over a minute old,
    -- progress rows of finished pages, workers silent for a day (the small tables read once,
    -- not once per queue); every queue every time was a prune transaction per queue and
    -- rotate_interval (200 a second at 1,000 idle queues).  The markers: one probe of their
    -- primary key per queue, a subplan (LIMIT keeps it one) whose scan of the table is priced
    -- out (enable_seqscan): planned on statistics of a full table, an EXISTS was a hash join,
    -- and this a scan, over every marker, and after a mass cancel was pruned or its queue
    -- dropped, over its dead rows until the next vacuum: 22-38 ms a pass at 100,000
    SELECT 'prune', q.queue_name FROM pglogq.queue q
     WHERE (SELECT true FROM pglogq.cancelled c WHERE c.queue_id = q.queue_id LIMIT 1)
        OR q.queue_id IN (
            SELECT k.queue_id FROM pglogq.idempotency_key k
             WHERE k.created_at < now() - (SELECT min(x.idempotency_window) FROM pglogq.queue x)
            UNION
            SELECT r.queue_id FROM pglogq.stop_request r WHERE r.requested_at < now() - interval '1 minute'
            UNION
            SELECT s.queue_id FROM pglogq.progress p JOIN pglogq.subscription s ON s.sub_id = p.sub_id
             WHERE s.batch_id IS DISTINCT FROM p.batch_id
            UNION
            SELECT s.queue_id FROM pglogq.subscription s
             WHERE s.parent_id IS NOT NULL AND s.batch_id IS NULL AND s.stream IS NULL
               AND s.last_seen < now() - interval '1 day')
    UNION ALL
    -- from the holders' rows, read once (an EXISTS per queue scanned them all for each queue)
    SELECT DISTINCT 'release', q.queue_name
      FROM pglogq._held_batches() h JOIN pglogq.queue q ON q.queue_id = h.queue_id
     WHERE h.silent_at < (SELECT clock_timestamp());
END $$;
