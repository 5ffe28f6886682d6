-- pglogq.maint_retention(queue_name): apply the queue's retention limit to stuck consumers.
-- Parameters: queue_name
-- Returns:    the number of consumers moved forward.
-- Raises:     PQ001 unknown queue.
-- Tables:     subscription (update; open batches of a moved consumer and its workers are dropped).
-- With max_consumer_lag = 0 (the default) nothing happens: a stuck consumer holds rotation back
-- and queue_info().rotation_blocked_by says so.  With a limit, a consumer whose position is older
-- than the limit is moved to the first tick within it; the events it skips are counted in
-- subscription.skipped_events / skipped_at (shown by consumer_info) and a WARNING is raised.
CREATE OR REPLACE FUNCTION pglogq.maint_retention(queue_name text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    target pglogq.tick;
    s record;
    pos record;
    n integer := 0;
BEGIN
    q := pglogq._queue(queue_name);
    IF q.max_consumer_lag = interval '0' THEN
        RETURN 0;
    END IF;
    SELECT * INTO target FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_time >= clock_timestamp() - q.max_consumer_lag
     ORDER BY t.tick_id LIMIT 1;
    IF NOT FOUND THEN
        SELECT * INTO target FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    END IF;
    FOR s IN
        -- candidates, read without locks; each is re-checked below under its locks
        SELECT c.sub_id, c.consumer_name FROM pglogq.subscription c
         WHERE c.queue_id = q.queue_id AND c.parent_id IS NULL
    LOOP
        -- lock order as receive: the workers first, then the consumer
        PERFORM 1 FROM pglogq.subscription w WHERE w.parent_id = s.sub_id ORDER BY w.sub_id FOR NO KEY UPDATE;
        PERFORM 1 FROM pglogq.subscription c WHERE c.sub_id = s.sub_id FOR NO KEY UPDATE;
        SELECT p.tick_id, p.tick_time, p.tick_event_seq INTO pos
          FROM pglogq.tick p
         WHERE p.queue_id = q.queue_id
           AND p.tick_id = (SELECT min(least(w.last_tick, w.batch_prev_tick)) FROM pglogq.subscription w
                             WHERE w.sub_id = s.sub_id OR w.parent_id = s.sub_id);
        CONTINUE WHEN NOT FOUND OR pos.tick_id >= target.tick_id
                      OR pos.tick_time >= clock_timestamp() - q.max_consumer_lag;
        UPDATE pglogq.subscription w
           SET batch_id = NULL, batch_prev_tick = NULL, batch_cur_tick = NULL, batch_big = NULL,
               batch_started_at = NULL, page_prio = NULL, page_txid = NULL, page_id = NULL,
               page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL
         WHERE w.sub_id = s.sub_id OR w.parent_id = s.sub_id;
        PERFORM pglogq._cursor_jump(s.sub_id, target.tick_id);  -- for cancel(): skipped is not handed
        UPDATE pglogq.subscription c
           SET last_tick = target.tick_id,
               skipped_events = c.skipped_events + greatest(target.tick_event_seq - pos.tick_event_seq, 0),
               skipped_at = clock_timestamp()
         WHERE c.sub_id = s.sub_id;
        RAISE WARNING 'consumer "%" of queue "%" was % behind (limit %): moved forward to tick %, skipping about % events',
            s.consumer_name, q.queue_name, date_trunc('second', clock_timestamp() - pos.tick_time),
            q.max_consumer_lag, target.tick_id, greatest(target.tick_event_seq - pos.tick_event_seq, 0);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
