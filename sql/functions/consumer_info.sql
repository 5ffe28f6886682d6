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
-- Tables:     queue, tick_head, subscription, subscriber, tick (through _consumer_ticks), retry,
--             dead_letter_count (read); for a share consumer
--             event, cancelled, attempt, dead_letter (read, through _lease_events).
-- Plans: custom (plan_cache_mode): every tick read names its queue's id, so that the plan reads
-- and locks that queue's tick partitions only (a lateral read keyed by the joined queue row is
-- pruned only at run time: planned, locked and started over every queue's partitions, once per
-- consumer: consumers times queues).
-- The tick figures come from pglogq._consumer_ticks, through the queue's copy of it when the
-- queue has one (its plans cached for the session: a listing repeated on one connection, as
-- the dashboard's, plans each queue's probes once, not on every call).
-- The ticks are read only for a queue with a consumer before tick_head.event_tick (the last
-- tick that closed events), or a batch open before it, or a share consumer: a consumer at or after
-- that tick has nothing pending (lag 0, 0 unread, 0 pending), whatever ticks came after it (every
-- later tick has the same event total).  Nor for a queue whose consumers and open batches are
-- behind that tick only, at or after tick_head.prev_event_tick (the tick of events before it):
-- every tick of that run has the total prev_event_total, so unread and pending are the events of
-- the last tick and the lag is its age (the figures of _consumer_ticks, without its reads).
-- Those queues are read one by one,
-- each in a subtransaction rolled back at its end (SQLSTATE PQ999, raised and caught here only),
-- which lets go of the locks of its partitions, their figures kept in arrays; then one query
-- returns every consumer.  A listing holds the locks of one queue at a time, whatever the number
-- of queues (each queue's tick partitions held to the end of the call ran out of the lock table
-- at 1,000 queues).  The first read of a queue's tick partitions in a session costs about a
-- millisecond (their relation cache entries): a listing of consumers with nothing pending costs none.
-- One consumer (for_consumer) reads its own rows only (by id and parent id), not every row of
-- its queue: its cost does not grow with the queue's other consumers (1,000 of them made it
-- 14 ms).
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
    one boolean := consumer_info.for_queue IS NOT NULL;
    -- for_consumer: its consumer rows (one per queue that has it), NULL for every consumer
    tops integer[];
    qid integer;  -- the queue of this round: its id in every tick read
    -- per consumer (its top row) of the queues whose ticks were read: the tick-derived figures
    k_top integer[] := '{}';
    k_lag interval[] := '{}';
    k_unread bigint[] := '{}';
    k_pending bigint[] := '{}';
    k_in_flight bigint[] := '{}';
    k_oldest interval[] := '{}';
    k_expired integer[] := '{}';
    k_redelivered bigint[] := '{}';
    a_top integer[];
    a_last bigint[];
    a_pos bigint[];
    any_share boolean;
    copy text;
    a_lag interval[];
    a_unread bigint[];
    a_pending bigint[];
    a_in_flight bigint[];
    a_oldest interval[];
    a_expired integer[];
    a_redelivered bigint[];
BEGIN
    IF one THEN
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
    IF consumer_info.for_consumer IS NOT NULL THEN
        tops := ARRAY(SELECT x.sub_id FROM pglogq.subscriber x
                       WHERE x.consumer_name = consumer_info.for_consumer AND x.parent_id IS NULL
                         AND (NOT one OR x.queue_id = qr.queue_id));
    END IF;
    -- the queues whose ticks must be read (see the header): a consumer before the last tick that
    -- closed events, or a batch open before it, or a share consumer; with each queue, its
    -- consumers' cursors and positions (one pass over the consumers and their rows: workers,
    -- streams, leases, grouped by consumer; no per-consumer subquery reads the subscription
    -- view, whose join a planner without statistics on sub_state runs as a hash join over every
    -- row, once per consumer: quadratic until the table is analyzed)
    FOR qid, a_top, a_last, a_pos, any_share IN
        SELECT g.queue_id, array_agg(g.top), array_agg(g.last_tick), array_agg(g.pos_tick), bool_or(g.share)
          FROM (SELECT w.queue_id, coalesce(w.parent_id, w.sub_id) AS top,
                       max(w.last_tick) FILTER (WHERE w.parent_id IS NULL) AS last_tick,
                       min(w.batch_prev_tick) AS pos_tick,
                       bool_or(w.share) AS share,
                       bool_or(w.parent_id IS NULL) AS consumer
                  FROM pglogq.subscription w
                 WHERE (NOT one OR w.queue_id = qr.queue_id)
                   AND (tops IS NULL OR w.sub_id = ANY (tops) OR w.parent_id = ANY (tops))
                 GROUP BY 1, 2) g
          LEFT JOIN pglogq.tick_head h ON h.queue_id = g.queue_id
         WHERE g.consumer  -- a group whose consumer row is gone (dropped meanwhile): none
         GROUP BY g.queue_id
        HAVING bool_or(h.event_tick IS NULL OR g.share OR g.last_tick IS NULL
                       OR (g.last_tick < h.event_tick OR g.pos_tick < h.event_tick)
                          -- behind the last tick of events only: its figures from tick_head
                          AND NOT (h.prev_event_tick IS NOT NULL AND h.prev_event_total IS NOT NULL
                                   AND h.event_time IS NOT NULL AND g.last_tick >= h.prev_event_tick
                                   AND coalesce(g.pos_tick, g.last_tick) >= h.prev_event_tick)) LOOP
        BEGIN
            -- the tick figures, through the queue's copy of _consumer_ticks (its plans cached
            -- for the session) when it has one
            copy := '_q' || qid || '_@copies@__consumer_ticks';
            IF to_regproc('pglogq.' || copy) IS NULL THEN
                copy := '_consumer_ticks';
            END IF;
            EXECUTE format('SELECT array_agg(x.top), array_agg(x.lag), array_agg(x.unread), array_agg(x.pending)'
                           '  FROM pglogq.%I($1, $2, $3, $4) x', copy)
               INTO a_top, a_lag, a_unread, a_pending USING qid, a_top, a_last, a_pos;
            IF any_share THEN
                -- share consumers only: their workers' leases (an ordinary consumer reads nothing)
                SELECT array_agg(sh.in_flight_events ORDER BY u.i), array_agg(sh.oldest_in_flight ORDER BY u.i),
                       array_agg(sh.expired_leases ORDER BY u.i), array_agg(sh.redelivered ORDER BY u.i)
                  INTO a_in_flight, a_oldest, a_expired, a_redelivered
                  FROM unnest(a_top) WITH ORDINALITY u(top, i)
                  LEFT JOIN pglogq.queue q ON q.queue_id = qid
                  LEFT JOIN pglogq.subscriber c ON c.sub_id = u.top
                  LEFT JOIN LATERAL (
                      SELECT coalesce(sum(le.events), 0)::bigint AS in_flight_events,
                             clock_timestamp() - min(w.batch_started_at) FILTER (WHERE le.events > 0) AS oldest_in_flight,
                             (count(*) FILTER (WHERE w.worker_name NOT LIKE 'ceded.%'
                                                 AND (w.released_at IS NOT NULL
                                                      OR w.heartbeat_at + q.dead_interval <= clock_timestamp())))::integer
                                 AS expired_leases,
                             coalesce(sum(le.redelivered), 0)::bigint AS redelivered
                        FROM pglogq.subscription w
                        LEFT JOIN (SELECT x.holder, count(*) AS events,
                                          count(*) FILTER (WHERE x.delivery_count > 1) AS redelivered
                                     FROM pglogq._lease_events(q.queue_id, u.top) x
                                    WHERE c.share  -- a one-time filter: never read for an ordinary consumer
                                    GROUP BY x.holder) le
                          ON le.holder = w.sub_id
                       WHERE c.share AND w.parent_id = u.top AND w.batch_id IS NOT NULL AND w.lease_end_txid IS NOT NULL
                      HAVING c.share) sh ON true;
            ELSE
                a_in_flight := array_fill(NULL::bigint, ARRAY[cardinality(a_top)]);
                a_oldest := array_fill(NULL::interval, ARRAY[cardinality(a_top)]);
                a_expired := array_fill(NULL::integer, ARRAY[cardinality(a_top)]);
                a_redelivered := array_fill(NULL::bigint, ARRAY[cardinality(a_top)]);
            END IF;
            k_top := k_top || a_top;
            k_lag := k_lag || a_lag;
            k_unread := k_unread || a_unread;
            k_pending := k_pending || a_pending;
            k_in_flight := k_in_flight || a_in_flight;
            k_oldest := k_oldest || a_oldest;
            k_expired := k_expired || a_expired;
            k_redelivered := k_redelivered || a_redelivered;
            RAISE SQLSTATE 'PQ999';
        EXCEPTION WHEN SQLSTATE 'PQ999' THEN
            NULL;  -- the figures are kept in the arrays, the locks let go
        END;
    END LOOP;
    -- every consumer: a consumer whose queue's ticks were not read has nothing pending (see the header)
    RETURN QUERY
    WITH g AS (
        SELECT coalesce(w.parent_id, w.sub_id) AS top,
               max(w.queue_id) AS queue_id,
               max(w.consumer_name) FILTER (WHERE w.parent_id IS NULL) AS consumer_name,
               max(w.last_tick) FILTER (WHERE w.parent_id IS NULL) AS last_tick,
               min(w.batch_prev_tick) AS pos_tick,
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
               count(*) FILTER (WHERE w.batch_id IS NOT NULL)::integer AS open_batches
          FROM pglogq.subscription w
         WHERE (NOT one OR w.queue_id = qr.queue_id)
           AND (tops IS NULL OR w.sub_id = ANY (tops) OR w.parent_id = ANY (tops))
         GROUP BY 1),
    k AS (
        SELECT * FROM unnest(k_top, k_lag, k_unread, k_pending, k_in_flight, k_oldest, k_expired, k_redelivered)
                   AS k(top, lag, unread, pending, in_flight_events, oldest_in_flight, expired_leases, redelivered))
    SELECT q.queue_name, s.consumer_name, s.last_tick,
           -- a queue whose ticks were not read: its consumers are at or after its last tick of
           -- events (nothing pending), or in the run of ticks just before it (tick_head's figures)
           coalesce(k.lag, CASE WHEN coalesce(s.pos_tick, s.last_tick) >= h.prev_event_tick
                                     AND coalesce(s.pos_tick, s.last_tick) < h.event_tick
                                THEN clock_timestamp() - h.event_time END, interval '0'),
           coalesce(k.unread, CASE WHEN s.last_tick >= h.prev_event_tick AND s.last_tick < h.event_tick
                                   THEN h.tick_event_total - h.prev_event_total END, 0::bigint),
           coalesce(k.pending, CASE WHEN coalesce(s.pos_tick, s.last_tick) >= h.prev_event_tick
                                         AND coalesce(s.pos_tick, s.last_tick) < h.event_tick
                                    THEN h.tick_event_total - h.prev_event_total END, 0::bigint),
           greatest(s.own_seen, s.workers_seen),
           s.batch_id, s.batch_started_at,
           s.workers,
           s.open_batches,
           (SELECT count(*) FROM pglogq.retry r WHERE r.sub_id = s.top),
           coalesce((SELECT c.dead_letters FROM pglogq.dead_letter_count c WHERE c.sub_id = s.top), 0),
           s.skipped_events, s.skipped_at, s.share,
           k.in_flight_events, k.oldest_in_flight, k.expired_leases, k.redelivered
      FROM g s
      JOIN pglogq.queue q ON q.queue_id = s.queue_id
      LEFT JOIN k ON k.top = s.top
      LEFT JOIN pglogq.tick_head h ON h.queue_id = s.queue_id
     WHERE s.consumer_name IS NOT NULL  -- a group whose consumer row is gone (dropped meanwhile): none
       AND (consumer_info.for_consumer IS NULL OR s.consumer_name = consumer_info.for_consumer)
     ORDER BY q.queue_name, s.consumer_name;
END $$;
