-- pglogq.lookup(queue_name, msg_id): what happened to one event, for every consumer of its queue.
-- Parameters: queue_name; msg_id  an id returned by send/send_batch on that queue
-- Returns:    one row per consumer (by name; none when the queue has no consumer):
--             consumer, state, detail (a sentence), type, created_at (when sent: NULL when the
--             event is not stored any more), worker, since, last_heartbeat, percent, stage
--             (in-flight), due_at (retry: when it comes back; waiting: a delayed send's time),
--             attempts (the attempt count, docs/how-to/job-history.md: the deliveries whose handler
--             ran or runs, failed ones included; retry: the failed ones so far), reason (retry,
--             dead: the last nack's; done, stopped: the last outcome's error, if any), dead_id
--             (dead), finished_at (done, stopped, dead: when the last handler run ended), result
--             (done, stopped: the handler's stored JSON result), history (every outcome of the
--             consumer's outcome log for the event, oldest first, within history_retention: a
--             JSON array of {attempt, outcome, worker, started_at, finished_at, error}; [] when
--             none).  state: 'waiting' (not handed to this consumer yet: sent,
--             delayed until due_at, or in its open batch after the page it holds); 'in-flight' (in
--             the page a worker of this consumer holds: worker, since (its handler's start, or the
--             batch's when nothing was reported yet), percent and stage as last reported,
--             last_heartbeat; a worker of a share consumer's lease: detail adds the delivery count and
--             when the lease's lock ends unless renewed, see pglogq.leases); 'retry' (failed, comes back to this consumer at due_at); 'dead' (in
--             the dead-letter queue); 'cancelled' (withdrawn by cancel before this consumer started
--             it); 'done' (handed to this consumer and its page acknowledged; an event whose dead
--             letter was purged leaves no other trace and shows as done; worker, since, finished_at
--             from the outcome log); 'stopped' (done, but its handler returned after a stop request,
--             cancel(running => true): the outcome log says so); 'skipped' (never handed to
--             this consumer: its cursor moved past it, by subscribing later, seek or the retention
--             limit); 'gone' (no event with this id is stored: its table was rotated away, its send
--             was rolled back or has not committed yet, or it was a delayed send cancelled before
--             it was due; detail says which of these the queue can rule out).  No other trace is
--             kept of these, so 'gone' is all that can be told.
-- Raises:     PQ001 unknown queue; PQ021 msg_id was never issued by this queue.
-- Tables:     event, delayed, cancelled, retry, dead_letter, progress, subscription, tick,
--             handed_run, queue, attempt, outcome (read).  The state retry is _retries' (the retry table,
--             or the stream of a partition held by a strict nack); the worker is _worker_name's,
--             so a partitioned queue answers as a queue of one partition does.
-- Reads only; takes no lock beyond the queue's shared advisory lock.  Each answer holds for the
-- moment of the call's snapshot (a state may change right after).  Cost: index look-ups: the
-- original event through the (ev_txid, ev_id) index from pglogq._event_txid_floor (1 to 5 ms on
-- a queue of 1,000,000 events; when the kept ticks cannot bound the id, the scan starts at the
-- oldest stored event: 84 ms for the last of 1,000,000), redeliveries through event_owned_id_idx.
-- Plans: the queue's copy (_queue_functions) answers when it exists, as in nack (why: its
-- header).  Without one: custom (plan_cache_mode), and every read of the event and tick tables names the queue's
-- id: the plans read and lock the queue's own partitions only, whatever the number of queues.
CREATE OR REPLACE FUNCTION pglogq.lookup(queue_name text, msg_id bigint)
RETURNS TABLE (consumer text, state text, detail text, type text, created_at timestamptz, worker text,
               since timestamptz, last_heartbeat timestamptz, percent numeric, stage text,
               due_at timestamptz, attempts integer, reason text, dead_id bigint,
               finished_at timestamptz, result jsonb, history jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    q pglogq.queue;
    wanted bigint := lookup.msg_id;
    c pglogq.subscription;
    h pglogq.subscription;
    orig pglogq.event;
    r pglogq.event;
    dl pglogq.delayed;
    lo xid8;
    snap pg_snapshot;
    cut bigint;
    pos integer;
    k integer;
    marked boolean;
    d record;
    lastout record;
    kept timestamptz;
    crashes integer;
BEGIN
    q := pglogq._queue(queue_name);
    -- queue copy: from here
    IF to_regproc(format('pglogq.%I', '_q' || q.queue_id || '_@copies@_lookup')) IS NOT NULL THEN
        RETURN QUERY EXECUTE format('SELECT * FROM pglogq.%I($1, $2)', '_q' || q.queue_id || '_@copies@_lookup')
            USING queue_name, wanted;
        RETURN;
    END IF;
    -- queue copy: to here
    IF wanted IS NULL OR wanted < 1 OR wanted > coalesce(pg_sequence_last_value(q.event_seq), 0) THEN
        RAISE EXCEPTION 'unknown message % on queue "%"', coalesce(wanted::text, 'NULL'), q.queue_name
            USING ERRCODE = 'PQ021', HINT = 'this queue has never issued that id';
    END IF;
    lo := pglogq._event_txid_floor(q.queue_id, wanted);
    SELECT * INTO orig FROM pglogq.event x
     WHERE x.ev_queue = q.queue_id AND x.ev_txid >= lo AND x.ev_id = wanted AND x.ev_owner IS NULL
     ORDER BY x.ev_txid LIMIT 1;
    SELECT * INTO dl FROM pglogq.delayed x WHERE x.queue_id = q.queue_id AND x.msg_id = wanted;
    marked := EXISTS (SELECT 1 FROM pglogq.cancelled x WHERE x.queue_id = q.queue_id AND x.msg_id = wanted);
    -- the first tick after the oldest one whose events are all stored: an id drawn after it
    -- belongs to a transaction that committed after that oldest tick, if it committed at all
    SELECT t.tick_event_seq INTO cut FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id > coalesce(q.retain_tick, 0) ORDER BY t.tick_id LIMIT 1;
    FOR c IN SELECT * FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL
              ORDER BY s.consumer_name LOOP
        consumer := c.consumer_name;
        state := NULL; detail := NULL; worker := NULL; since := NULL; last_heartbeat := NULL;
        percent := NULL; stage := NULL; due_at := NULL; attempts := NULL; reason := NULL; dead_id := NULL;
        finished_at := NULL; result := NULL; history := '[]'::jsonb;
        type := coalesce(orig.ev_type, dl.ev_type);
        created_at := coalesce(orig.ev_time, dl.ev_time);
        -- the consumer's outcome log for the event (record_outcomes): every attempt, oldest first
        kept := clock_timestamp() - q.history_retention;
        SELECT * INTO lastout FROM pglogq._event_outcomes(c.sub_id, wanted, kept) o
         ORDER BY o.finished_at DESC, o.seq DESC LIMIT 1;
        IF lastout.outcome IS NOT NULL THEN
            SELECT jsonb_agg(jsonb_build_object('attempt', o.attempt, 'outcome', o.outcome, 'worker', o.worker,
                                                'started_at', o.started_at, 'finished_at', o.finished_at,
                                                'error', o.error) ORDER BY o.finished_at, o.seq) INTO history
              FROM pglogq._event_outcomes(c.sub_id, wanted, kept) o;
        END IF;
        SELECT x.dead_id, x.reason, x.retry_count, x.ev_type, x.ev_time, x.failed_at INTO d
          FROM pglogq.dead_letter x WHERE x.sub_id = c.sub_id AND x.msg_id = wanted;
        IF FOUND THEN
            state := 'dead'; dead_id := d.dead_id; reason := d.reason; attempts := d.retry_count + 1;
            type := d.ev_type; created_at := d.ev_time; since := d.failed_at;
            finished_at := d.failed_at;
            detail := format('in the dead-letter queue (dead letter %s) after %s failed deliveries',
                             d.dead_id, d.retry_count + 1);
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- the retry table, or a partition's stream held at the event by a strict nack
        SELECT x.due_at, x.attempts, x.reason, x.ev_type, x.ev_time INTO d
          FROM pglogq._retries(c.sub_id, 0, wanted) x;
        IF FOUND THEN
            state := 'retry'; due_at := d.due_at; attempts := d.attempts; reason := d.reason;
            type := d.ev_type; created_at := d.ev_time;
            detail := format('failed %s time(s); comes back at its due time', d.attempts);
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT coalesce(p.worker, pglogq._worker_name(x), c.consumer_name) AS worker, p.started_at,
               p.percent, p.stage,
               greatest(p.heartbeat_at, x.heartbeat_at) AS beat, p.retry_count + coalesce(a.crashes, 0) AS tries,
               CASE WHEN x.lease_end_txid IS NOT NULL THEN least(x.released_at, x.heartbeat_at + q.dead_interval) END
                   AS lease_ends INTO d
          FROM pglogq.progress p
          JOIN pglogq.subscription x ON x.sub_id = p.sub_id AND x.batch_id = p.batch_id
          LEFT JOIN pglogq.attempt a ON a.sub_id = p.sub_id AND a.msg_id = p.msg_id
         WHERE (x.sub_id = c.sub_id OR x.parent_id = c.sub_id) AND p.msg_id = wanted
         LIMIT 1;
        IF FOUND THEN
            state := 'in-flight'; worker := d.worker; since := d.started_at; percent := d.percent;
            stage := d.stage; last_heartbeat := d.beat; attempts := d.tries + 1;
            detail := 'being handled (progress reported)' || pglogq._lease_detail(d.tries, d.lease_ends);
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF dl.msg_id IS NOT NULL THEN
            state := 'waiting'; due_at := dl.deliver_at; attempts := 0;
            detail := 'a delayed send: enters the queue at its due time';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF marked THEN
            state := 'cancelled'; detail := 'cancelled before this consumer started it';
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- the latest copy this consumer can get: a redelivery (retry, replay) or the original
        r := NULL;
        SELECT * INTO r FROM pglogq.event x
         WHERE x.ev_queue = q.queue_id AND x.ev_id = wanted AND x.ev_owner IS NOT NULL AND x.ev_owner = c.sub_id
         ORDER BY x.ev_txid DESC LIMIT 1;
        IF r.ev_id IS NULL THEN
            r := orig;
        END IF;
        IF r.ev_id IS NULL AND lastout.outcome IN ('done', 'stopped') THEN
            -- rotated away, but the outcome log still tells how it ended
            state := lastout.outcome; worker := lastout.worker; since := lastout.started_at;
            finished_at := lastout.finished_at; attempts := lastout.attempt; reason := lastout.error;
            result := lastout.result; type := coalesce(type, lastout.ev_type);
            detail := 'not stored any more (rotated away); its outcome log says how it ended';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF r.ev_id IS NULL THEN
            state := 'gone';
            IF cut IS NOT NULL AND wanted > cut THEN  -- newer than anything rotation can have removed
                detail := 'not stored: its send was rolled back or has not committed yet, or it was a delayed '
                          'send cancelled before it was due (not rotated away: the queue still stores '
                          'everything from its time)';
            ELSE
                detail := 'not stored: rotated away, or its send was rolled back or has not committed yet, or '
                          'it was a delayed send cancelled before it was due';
            END IF;
            RETURN NEXT;
            CONTINUE;
        END IF;
        type := r.ev_type; created_at := r.ev_time;
        -- in an open batch of the consumer or one of its workers (the cursor moved past it already)
        pos := NULL;
        FOR h IN SELECT x.* FROM pglogq.subscription x
                   JOIN pglogq.tick tp ON tp.queue_id = q.queue_id AND tp.tick_id = x.batch_prev_tick
                   JOIN pglogq.tick tc ON tc.queue_id = q.queue_id AND tc.tick_id = x.batch_cur_tick
                  WHERE (x.sub_id = c.sub_id OR x.parent_id = c.sub_id) AND x.batch_id IS NOT NULL
                    AND CASE WHEN coalesce(x.stream, x.lease_stream) IS NULL
                             THEN NOT (q.urgent_lane AND r.ev_priority > 100)
                             WHEN coalesce(x.stream, x.lease_stream) = -1 THEN r.ev_priority > 100
                             WHEN coalesce(x.stream, x.lease_stream) <= -2
                             THEN r.ev_id % 8 = -2 - coalesce(x.stream, x.lease_stream)
                                  AND NOT (q.urgent_lane AND r.ev_priority > 100)
                             ELSE x.stream = r.ev_partition END
                    AND pg_visible_in_snapshot(r.ev_txid, tc.tick_snapshot)
                    AND NOT pg_visible_in_snapshot(r.ev_txid, tp.tick_snapshot) LOOP
            -- a share consumer's batch has several holders (the consumer, handing it out, and a
            -- lease per worker): the event is in flight if a holder has it in its page, waiting if
            -- one has not returned it yet, done otherwise (a lease's end bounds its holder)
            k := pglogq._page_position(h, r.ev_priority, r.ev_txid, r.ev_id);
            IF k = 2 OR (pos IS NOT NULL AND (pos = 0 OR (pos = 1 AND k < 0))) THEN
                CONTINUE;
            END IF;
            pos := k;
            IF pos < 0 THEN
                state := 'done'; detail := 'handed to this consumer and its page acknowledged';
            ELSIF pos = 0 THEN
                state := 'in-flight'; worker := coalesce(pglogq._worker_name(h), c.consumer_name);
                since := h.batch_started_at; last_heartbeat := h.heartbeat_at;
                SELECT coalesce(max(a.crashes), 0) INTO crashes FROM pglogq.attempt a
                 WHERE a.sub_id = h.sub_id AND a.msg_id = wanted;
                attempts := r.ev_retry + crashes + 1;
                detail := 'in the page a worker holds (no progress reported)' || pglogq._lease_detail(
                    attempts - 1, CASE WHEN h.lease_end_txid IS NOT NULL
                                       THEN least(h.released_at, h.heartbeat_at + q.dead_interval) END);
            ELSE
                state := 'waiting'; attempts := r.ev_retry;
                detail := 'in an open batch of this consumer, after the page its worker holds';
            END IF;
        END LOOP;
        IF pos IS NOT NULL THEN
            IF state = 'done' AND lastout.outcome IS NOT NULL THEN
                -- the outcome log says who finished it, when, and how
                worker := lastout.worker; since := lastout.started_at; finished_at := lastout.finished_at;
                attempts := lastout.attempt; reason := lastout.error;
                IF lastout.outcome IN ('done', 'stopped') THEN
                    result := lastout.result;
                END IF;
                IF lastout.outcome = 'stopped' THEN
                    state := 'stopped';
                    detail := 'its handler returned after a stop request (cancel with running): acknowledged';
                END IF;
            END IF;
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- on a partitioned queue, the cursor of the stream of the event's partition, or the
        -- consumer's when it is ahead (a stream with nothing to read keeps its cursor where it
        -- last read, maybe on a tick gone: it has passed everything up to the consumer's); an
        -- urgent event of a queue with an urgent lane, the lane's
        SELECT t.tick_snapshot INTO snap FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id
           AND t.tick_id = greatest(c.last_tick, (SELECT st.last_tick FROM pglogq.subscription st
                                      WHERE st.parent_id = c.sub_id
                                        AND st.stream = CASE WHEN q.urgent_lane AND r.ev_priority > 100 THEN -1
                                                             ELSE coalesce(r.ev_partition, -2 - r.ev_id % 8) END));
        IF snap IS NOT NULL AND pg_visible_in_snapshot(r.ev_txid, snap) THEN
            IF (c.handed_from IS NULL OR NOT pg_visible_in_snapshot(r.ev_txid, c.handed_from))
               OR EXISTS (SELECT 1 FROM pglogq.handed_run hr
                           WHERE hr.sub_id = c.sub_id AND pg_visible_in_snapshot(r.ev_txid, hr.to_snap)
                             AND (hr.from_snap IS NULL OR NOT pg_visible_in_snapshot(r.ev_txid, hr.from_snap))) THEN
                state := 'done'; detail := 'handed to this consumer and its page acknowledged';
                IF state = 'done' AND lastout.outcome IS NOT NULL THEN
                    -- the outcome log says who finished it, when, and how
                    worker := lastout.worker; since := lastout.started_at; finished_at := lastout.finished_at;
                    attempts := lastout.attempt; reason := lastout.error;
                    IF lastout.outcome IN ('done', 'stopped') THEN
                        result := lastout.result;
                    END IF;
                    IF lastout.outcome = 'stopped' THEN
                        state := 'stopped';
                        detail := 'its handler returned after a stop request (cancel with running): acknowledged';
                    END IF;
                END IF;
            ELSE
                state := 'skipped';
                detail := 'never handed to this consumer: its cursor moved past it (subscribed later, seek or retention)';
            END IF;
        ELSE
            state := 'waiting'; attempts := r.ev_retry; detail := 'not in a batch of this consumer yet';
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;
