-- pglogq.seek(queue_name, consumer_name, to_position, by_events, force): move a consumer's cursor.
-- Parameters: queue_name; consumer_name; to_position / by_events  as for pglogq.seek_plan
--             (exactly one of them); force  also when a batch is open: the open batches of the
--             consumer and of its workers are dropped (their unacknowledged events are then
--             delivered again only if the target is before them); for a share consumer, its
--             leases end (its workers' late acks, nacks and cedes are refused, PQ009, their
--             heartbeats return false) and the events ceded but not taken over go with them
-- Returns:    the plan that was applied (the columns of pglogq.seek_plan); the consumer's next
--             batch starts after target_tick.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ016 a batch is open (without force;
--             a share consumer: a lease is out, see seek_plan's open_batches);
--             PQ017 target outside what the queue still keeps; PQ019 invalid position.
-- Tables:     subscription (lock; update of the consumer and of workers holding batches; a
--             share consumer's rows of ceded events deleted), progress and attempt (rows of
--             dropped batches deleted), queue and tick (read).
-- Locks the consumer's workers, then the consumer (the order receive uses), so a concurrent
-- receive either finishes before the seek or starts from the new position.
CREATE OR REPLACE FUNCTION pglogq.seek(
    queue_name text, consumer_name text, to_position text DEFAULT NULL, by_events bigint DEFAULT NULL,
    force boolean DEFAULT false)
RETURNS TABLE (current_tick bigint, current_tick_time timestamptz,
               target_tick bigint, target_tick_time timestamptz, delta_events bigint,
               earliest_tick bigint, earliest_tick_time timestamptz, latest_tick bigint,
               latest_tick_time timestamptz, open_batches integer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    c pglogq.subscription;
    p record;
BEGIN
    q := pglogq._queue(queue_name);
    c := pglogq._consumer(q.queue_id, q.queue_name, consumer_name);
    -- held until commit: maint_prune and rotation skip the queue while a cursor is being moved
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.cursor'), q.queue_id);
    PERFORM 1 FROM pglogq.subscription s WHERE s.parent_id = c.sub_id ORDER BY s.sub_id FOR NO KEY UPDATE;
    PERFORM 1 FROM pglogq.subscription s WHERE s.sub_id = c.sub_id FOR NO KEY UPDATE;
    SELECT * INTO p FROM pglogq.seek_plan(queue_name, consumer_name, to_position, by_events);
    IF p.open_batches > 0 AND NOT coalesce(force, false) THEN
        RAISE EXCEPTION 'consumer "%" has % open %', c.consumer_name, p.open_batches,
            CASE WHEN c.share THEN 'lease(s)' ELSE 'batch(es)' END
            USING ERRCODE = 'PQ016',
                  HINT = 'ack them (stop its workers) first, or pass force => true to drop them';
    END IF;
    -- the batches held (forced), and a share consumer's batch being handed out (nobody's)
    PERFORM pglogq._close_batch(s.sub_id) FROM pglogq.subscription s
      WHERE (s.sub_id = c.sub_id OR s.parent_id = c.sub_id) AND s.batch_id IS NOT NULL;
    -- the rows cede made for events given back: their events went with the leases
    DELETE FROM pglogq.subscriber x WHERE x.parent_id = c.sub_id AND x.worker_name LIKE 'ceded.%';
    PERFORM pglogq._move_cursor(c.sub_id, p.target_tick, false);
    current_tick := p.current_tick;
    current_tick_time := p.current_tick_time;
    target_tick := p.target_tick;
    target_tick_time := p.target_tick_time;
    delta_events := p.delta_events;
    earliest_tick := p.earliest_tick;
    earliest_tick_time := p.earliest_tick_time;
    latest_tick := p.latest_tick;
    latest_tick_time := p.latest_tick_time;
    open_batches := p.open_batches;
    RETURN NEXT;
END $$;
