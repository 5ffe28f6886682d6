-- pglogq.maint_next_due(): the soonest time a maintenance step falls due by time alone.
-- Parameters: none.
-- Returns:    the least of the soonest retry's due time, delayed send's delivery time, planned
--             schedule's next due time, silent worker's release (pglogq._held_batches) and
--             queue's rotation (its rotation_period after its last switch); NULL: none waits.
-- Tables:     retry, delayed, schedule (read: the end of each one's time index), subscription,
--             queue (read).
-- A maintenance loop that found nothing to do may pause until then instead of asking again every
-- half second (the daemon does while its ticker sleeps: what else gives maintenance work wakes
-- that ticker, see pglogq._wake_ticker).  Pruning and the metadata switches are not counted
-- here: housekeeping, they wait for the pause's bound (the daemon's maint_idle_interval).
CREATE OR REPLACE FUNCTION pglogq.maint_next_due()
RETURNS timestamptz LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT least((SELECT min(r.due_at) FROM pglogq.retry r),
                 (SELECT min(d.deliver_at) FROM pglogq.delayed d),
                 (SELECT min(s.next_due) FROM pglogq.schedule s),
                 (SELECT min(h.silent_at) FROM pglogq._held_batches() h),
                 (SELECT min(q.switch_time + q.rotation_period) FROM pglogq.queue q WHERE q.switch_step2 IS NOT NULL))
$$;
