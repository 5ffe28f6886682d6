-- pglogq._held_batches(): the batches cooperating workers hold, and when each holder counts as silent.
-- Parameters: none.
-- Returns:    rows (queue_id, sub_id, silent_at): a worker's row holding a batch not released
--             yet, and the time its silence reaches the queue's dead_interval (its last
--             heartbeat, progress or receive plus dead_interval).
-- Tables:     subscription, queue (read).
-- What maintenance lists for release (maint_operations) and when the next release falls due
-- (maint_next_due) come from here; maint_release selects the same rows with their locks.
CREATE OR REPLACE FUNCTION pglogq._held_batches()
RETURNS TABLE (queue_id integer, sub_id integer, silent_at timestamptz) LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT s.queue_id, s.sub_id, s.heartbeat_at + q.dead_interval
      FROM pglogq.subscription s JOIN pglogq.queue q ON q.queue_id = s.queue_id
     WHERE s.parent_id IS NOT NULL AND s.batch_id IS NOT NULL
       AND (s.stream IS NULL OR s.page_end_txid IS NOT NULL)
       AND s.released_at IS NULL
$$;
