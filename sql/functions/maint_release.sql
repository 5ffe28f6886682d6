-- pglogq.maint_release(queue_name): offer the batches of silent workers to every other worker.
-- Parameters: queue_name
-- Returns:    the number of batches released.
-- Raises:     PQ001 unknown queue.
-- Tables:     sub_state (released_at of the silent worker's row), tick_head (read: the last tick,
--             which the NOTIFY "pglogq.<queue>" carries).
-- A cooperating worker silent for longer than the queue's dead_interval (no heartbeat, progress
-- or receive) while it holds a batch is taken for dead: its batch is marked released and the
-- queue's channel is notified, so that idle workers ask at once and the first receive of any
-- worker of the consumer takes the batch over (_take_batch), without waiting for a busy
-- survivor to finish.  A released worker that turns out alive keeps its batch until someone
-- takes it (its next heartbeat clears the mark).  Rows locked by a running receive are skipped.
-- Bound: a dead worker's batch is offered at most dead_interval + the maintenance period after
-- its last heartbeat.
CREATE OR REPLACE FUNCTION pglogq.maint_release(queue_name text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    n integer;
BEGIN
    q := pglogq._queue(queue_name);
    UPDATE pglogq.sub_state s SET released_at = clock_timestamp()
     WHERE s.sub_id IN (SELECT x.sub_id FROM pglogq.subscription x
                         WHERE x.queue_id = q.queue_id AND x.parent_id IS NOT NULL AND x.batch_id IS NOT NULL
                           AND (x.stream IS NULL OR x.page_end_txid IS NOT NULL)
                           AND x.released_at IS NULL AND x.heartbeat_at < clock_timestamp() - q.dead_interval
                           FOR NO KEY UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('pglogq.' || q.queue_name,
                          (SELECT th.tick_id FROM pglogq.tick_head th WHERE th.queue_id = q.queue_id)::text);
    END IF;
    RETURN n;
END $$;
