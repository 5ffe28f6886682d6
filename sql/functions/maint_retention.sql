-- pglogq.maint_retention(queue_name): apply the queue's retention limit to stuck consumers.
-- Parameters: queue_name
-- Returns:    the number of consumers moved forward.
-- Raises:     PQ001 unknown queue.
-- Tables:     subscription (update; open batches of a moved consumer and its workers are dropped),
--             progress (rows of those batches deleted), tick (read).
-- With max_consumer_lag = 0 (the default) nothing happens: a stuck consumer holds rotation back
-- and queue_info().rotation_blocked_by says so.  With a limit, a consumer further behind than
-- the limit -- the first tick after its position (the oldest it has not passed, as
-- consumer_info's lag) was made longer ago -- is moved to the last tick made before the limit:
-- what was ticked within the limit stays, and a caught-up consumer (no tick after its position)
-- never moves, however old its tick.  Its open batches, and its workers', that end by that tick
-- are dropped (one ending after it holds events ticked within the limit and stays).  The
-- events it skips are counted in subscription.skipped_events; skipped_at is the instant the pass
-- judged by (the server clock, read once when the pass starts: its limit was skipped_at -
-- max_consumer_lag, so what it skipped can be checked against the tick times afterwards); both
-- are shown by consumer_info, and a WARNING is raised.  A consumer whose rows another session
-- holds (a receive, an ack, a seek in progress) is left for the next pass.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq.maint_retention(queue_name text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
    target pglogq.tick;
    judged_at timestamptz;
    limit_at timestamptz;
    s record;
    pos record;
    nxt_time timestamptz;
    moved boolean;
    got integer;
    n integer := 0;
BEGIN
    q := pglogq._queue(queue_name);
    IF q.max_consumer_lag = interval '0' THEN
        RETURN 0;
    END IF;
    judged_at := clock_timestamp();
    limit_at := judged_at - q.max_consumer_lag;
    FOR s IN
        -- candidates, read without locks; each is re-checked below under its locks (taken in
        -- sub_id order, so two retention runs of one queue never deadlock)
        SELECT c.sub_id, c.consumer_name FROM pglogq.subscription c
         WHERE c.queue_id = q.queue_id AND c.parent_id IS NULL
         ORDER BY c.sub_id
    LOOP
        -- lock order as receive: the workers first, then the consumer.  SKIP LOCKED: a consumer
        -- in a receive or ack right now is not stuck, and a long page transaction must not hold
        -- up maintenance (nor can two sessions deadlock): such a consumer waits for the next pass
        PERFORM 1 FROM pglogq.subscription w WHERE w.parent_id = s.sub_id ORDER BY w.sub_id
            FOR NO KEY UPDATE SKIP LOCKED;
        GET DIAGNOSTICS got = ROW_COUNT;
        CONTINUE WHEN got <> (SELECT count(*) FROM pglogq.subscription w WHERE w.parent_id = s.sub_id);
        PERFORM 1 FROM pglogq.subscription c WHERE c.sub_id = s.sub_id FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        SELECT p.tick_id, p.tick_time, p.tick_event_total INTO pos
          FROM pglogq.tick p
         WHERE p.queue_id = q.queue_id
           AND p.tick_id = (SELECT min(least(w.last_tick, w.batch_prev_tick)) FROM pglogq.subscription w
                             WHERE w.sub_id = s.sub_id OR w.parent_id = s.sub_id);
        CONTINUE WHEN NOT FOUND;  -- unsubscribed meanwhile, or on a tick that is gone (seek it)
        -- how far behind: the age of the first tick after its position (none: caught up)
        nxt_time := NULL;
        SELECT t.tick_time INTO nxt_time FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_id > pos.tick_id
         ORDER BY t.tick_id LIMIT 1;
        CONTINUE WHEN nxt_time IS NULL OR nxt_time >= limit_at;
        -- the last tick made before the limit (at least that first tick, as it is older)
        target := NULL;
        SELECT * INTO target FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_id > pos.tick_id AND t.tick_time < limit_at
         ORDER BY t.tick_id DESC LIMIT 1;
        CONTINUE WHEN target.tick_id IS NULL;
        -- open batches that end by the target are dropped (their events are skipped); one that
        -- ends after it holds events ticked within the limit and stays
        PERFORM pglogq._close_batch(w.sub_id) FROM pglogq.subscription w
          WHERE (w.sub_id = s.sub_id OR w.parent_id = s.sub_id) AND w.batch_id IS NOT NULL
            AND w.batch_cur_tick <= target.tick_id;
        moved := FOUND;
        -- forward only; the jump is recorded for cancel() (skipped is not handed) either way
        IF pglogq._move_cursor(s.sub_id, target.tick_id, true) THEN
            moved := true;
        END IF;
        CONTINUE WHEN NOT moved;
        UPDATE pglogq.sub_state c
           SET skipped_events = c.skipped_events + greatest(target.tick_event_total - pos.tick_event_total, 0),
               skipped_at = judged_at
         WHERE c.sub_id = s.sub_id;
        RAISE WARNING 'consumer "%" of queue "%" was % behind (limit %): moved forward to tick %, skipping % events',
            s.consumer_name, q.queue_name, date_trunc('second', judged_at - nxt_time),
            q.max_consumer_lag, target.tick_id, greatest(target.tick_event_total - pos.tick_event_total, 0);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
