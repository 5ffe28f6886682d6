-- pglogq.consumer_info(for_queue, for_consumer): one row per consumer for monitoring.
-- Parameters: for_queue  a queue name, NULL for every queue; for_consumer  a consumer name, NULL for
--             every consumer (with for_queue NULL: that consumer on every queue that has it)
-- Returns:    queue_name, consumer_name, last_tick, lag (the age of its oldest pending event,
--             from the tick that holds it; 0 when nothing is pending: empty ticks are no lag),
--             lag_events ("unread": ticked events not yet handed to any worker, as the ticks
--             counted them: retried events of every consumer included; a cooperating worker's
--             batch is handed out), pending_events (ticked events not yet acknowledged: the
--             unread ones and the open batches and leases), last_seen, batch_id (of the
--             consumer itself), batch_open_since, workers, open_batches, retry_depth, dead_letters,
--             skipped_events / skipped_at (what the retention limit made it skip, see maint_retention),
--             share (a share consumer: open_batches counts its workers' leases, and the batch it
--             is handing out).
--             A share consumer's leases (NULL for an ordinary consumer; see pglogq.leases):
--             in_flight_events (events its workers hold in leases, not acknowledged), oldest_in_flight
--             (age of the oldest lease holding events: since it was taken, or taken over),
--             expired_leases (leases past their lock's expiry, or released by maintenance, that no
--             worker took over yet: the next receive of any worker takes them), redelivered (leased
--             events delivered more than once: a delivery count above 1).
--             On a partitioned queue: last_tick, lag and the counts are those of the consumer's
--             cursor, which follows its slowest partition (so lag_events and pending_events count
--             every event after it, also those a faster partition passed: an upper bound);
--             workers counts the workers holding a partition's page now; open_batches counts the
--             partitions' open batches.
-- Raises:     PQ001 for_queue names no queue; PQ002 for_consumer names no consumer (of for_queue,
--             or of any queue when for_queue is NULL): a typo is an error, never "no such lag".
-- Tables:     queue, subscription, tick, retry, dead_letter_count (read); for a share consumer
--             event, cancelled, attempt, dead_letter (read, through _lease_events).
-- Plans: custom (plan_cache_mode), one query per queue (in queue name order), every tick read
-- naming its id, so that the plan reads and locks that queue's tick partitions only (a lateral
-- read keyed by the joined queue row is pruned only at run time: planned, locked and started
-- over every queue's partitions, once per consumer: consumers times queues).
CREATE OR REPLACE FUNCTION pglogq.consumer_info(for_queue text DEFAULT NULL, for_consumer text DEFAULT NULL)
RETURNS TABLE (queue_name text, consumer_name text, last_tick bigint, lag interval, lag_events bigint,
               pending_events bigint, last_seen timestamptz, batch_id bigint, batch_open_since timestamptz,
               workers integer, open_batches integer, retry_depth bigint, dead_letters bigint,
               skipped_events bigint, skipped_at timestamptz, share boolean,
               in_flight_events bigint, oldest_in_flight interval, expired_leases integer, redelivered bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    qr pglogq.queue;
    qid integer;  -- the queue of this round: its id in every tick read
BEGIN
    IF consumer_info.for_queue IS NOT NULL THEN
        qr := pglogq._queue(consumer_info.for_queue);
        IF consumer_info.for_consumer IS NOT NULL THEN
            PERFORM pglogq._consumer(qr.queue_id, qr.queue_name, consumer_info.for_consumer);
        END IF;
    ELSIF consumer_info.for_consumer IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM pglogq.subscription x
                           WHERE x.consumer_name = consumer_info.for_consumer AND x.parent_id IS NULL) THEN
        RAISE EXCEPTION 'unknown consumer "%" on every queue', left(consumer_info.for_consumer, 80)
            USING ERRCODE = 'PQ002', HINT = 'pglogq.consumer_info() lists the consumers';
    END IF;
    -- One pass over the consumers and their rows (workers, streams, leases), grouped by consumer,
    -- then index look-ups per consumer: no per-consumer subquery reads the subscription view, whose
    -- join (subscriber, sub_state) a planner without statistics on sub_state runs as a hash join
    -- over every row, once per consumer (quadratic until the table is analyzed).  The tick reads
    -- are LATERAL ... LIMIT 1, so they stay index probes whatever the statistics.
    FOR qid IN SELECT x.queue_id FROM pglogq.queue x
                WHERE consumer_info.for_queue IS NULL OR x.queue_name = consumer_info.for_queue
                ORDER BY x.queue_name LOOP
    RETURN QUERY
    WITH g AS (
        SELECT coalesce(w.parent_id, w.sub_id) AS top,
               max(w.queue_id) AS queue_id,
               max(w.consumer_name) FILTER (WHERE w.parent_id IS NULL) AS consumer_name,
               max(w.last_tick) FILTER (WHERE w.parent_id IS NULL) AS last_tick,
               max(w.last_seen) FILTER (WHERE w.parent_id IS NULL) AS own_seen,
               max(w.last_seen) FILTER (WHERE w.parent_id IS NOT NULL) AS workers_seen,
               max(w.batch_id) FILTER (WHERE w.parent_id IS NULL) AS batch_id,
               max(w.batch_started_at) FILTER (WHERE w.parent_id IS NULL) AS batch_started_at,
               max(w.skipped_events) FILTER (WHERE w.parent_id IS NULL) AS skipped_events,
               max(w.skipped_at) FILTER (WHERE w.parent_id IS NULL) AS skipped_at,
               bool_or(w.share) FILTER (WHERE w.parent_id IS NULL) AS share,
               (count(*) FILTER (WHERE w.parent_id IS NOT NULL AND w.stream IS NULL
                                   AND w.worker_name NOT LIKE 'ceded.%')
                + count(DISTINCT w.lease_worker) FILTER (WHERE w.parent_id IS NOT NULL AND w.stream IS NOT NULL
                                                           AND w.page_end_txid IS NOT NULL))::integer AS workers,
               count(*) FILTER (WHERE w.batch_id IS NOT NULL)::integer AS open_batches,
               min(w.batch_prev_tick) AS pos_tick
          FROM pglogq.subscription w
         WHERE w.queue_id = qid
         GROUP BY 1)
    SELECT q.queue_name, s.consumer_name, s.last_tick,
           CASE WHEN lt.tick_event_total > pos.tick_event_total THEN clock_timestamp() - nxt.tick_time
                ELSE interval '0' END,
           greatest(lt.tick_event_total - cur.tick_event_total, 0),
           greatest(lt.tick_event_total - pos.tick_event_total, 0),
           greatest(s.own_seen, s.workers_seen),
           s.batch_id, s.batch_started_at,
           s.workers,
           s.open_batches,
           (SELECT count(*) FROM pglogq.retry r WHERE r.sub_id = s.top),
           coalesce((SELECT c.dead_letters FROM pglogq.dead_letter_count c WHERE c.sub_id = s.top), 0),
           s.skipped_events, s.skipped_at, s.share,
           sh.in_flight_events, sh.oldest_in_flight, sh.expired_leases, sh.redelivered
      FROM g s
      JOIN pglogq.queue q ON q.queue_id = s.queue_id
      LEFT JOIN LATERAL (SELECT * FROM pglogq.tick t WHERE t.queue_id = qid
                          ORDER BY t.tick_id DESC LIMIT 1) lt ON true
      LEFT JOIN LATERAL (SELECT * FROM pglogq.tick t WHERE t.queue_id = qid
                          AND t.tick_id = s.last_tick LIMIT 1) cur ON true
      LEFT JOIN LATERAL (SELECT * FROM pglogq.tick t WHERE t.queue_id = qid
                          AND t.tick_id = coalesce(s.pos_tick, s.last_tick) LIMIT 1) pos ON true
      -- lag's tick: the first after the position that closes an event (empty ticks hold none);
      -- read only when something is pending, so an idle consumer scans no run of empty ticks
      LEFT JOIN LATERAL (SELECT * FROM pglogq.tick t WHERE t.queue_id = qid
                          AND lt.tick_event_total > pos.tick_event_total
                          AND t.tick_id > pos.tick_id AND t.tick_event_total > pos.tick_event_total
                          ORDER BY t.tick_id LIMIT 1) nxt ON true
      -- share consumers only: their workers' leases (an ordinary consumer reads nothing here)
      LEFT JOIN LATERAL (
          SELECT coalesce(sum(le.events), 0)::bigint AS in_flight_events,
                 clock_timestamp() - min(w.batch_started_at) FILTER (WHERE le.events > 0) AS oldest_in_flight,
                 (count(*) FILTER (WHERE w.worker_name NOT LIKE 'ceded.%'
                                     AND (w.released_at IS NOT NULL
                                          OR w.heartbeat_at + q.dead_interval <= clock_timestamp())))::integer
                     AS expired_leases,
                 coalesce(sum(le.redelivered), 0)::bigint AS redelivered
            FROM pglogq.subscription w
            LEFT JOIN (SELECT x.holder, count(*) AS events, count(*) FILTER (WHERE x.delivery_count > 1) AS redelivered
                         FROM pglogq._lease_events(q.queue_id, s.top) x
                        WHERE s.share  -- a one-time filter: never read for an ordinary consumer
                        GROUP BY x.holder) le
              ON le.holder = w.sub_id
           WHERE s.share AND w.parent_id = s.top AND w.batch_id IS NOT NULL AND w.lease_end_txid IS NOT NULL
          HAVING s.share) sh ON true
     WHERE s.consumer_name IS NOT NULL  -- a group whose consumer row is gone (dropped meanwhile): none
       AND (consumer_info.for_consumer IS NULL OR s.consumer_name = consumer_info.for_consumer)
     ORDER BY s.consumer_name;
    END LOOP;
END $$;
