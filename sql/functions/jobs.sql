-- pglogq.jobs(queue_name, consumer_name, msg_type, in_state, max_rows, after, ...): list jobs, a page at a time.
-- The events of a queue that are not done, or (finished_since, finished_until) the finished
-- handler runs of the outcome log, per consumer.
-- Parameters: queue_name; consumer_name  only this consumer (NULL: every consumer, by name);
--             msg_type  only events of this type (NULL: any); in_state  only 'in-flight', 'retry',
--             'dead' or 'waiting' (NULL: all four, in that order), or the outcome log: 'finished'
--             (every outcome), 'done', 'failed', 'cancelled', 'stopped' or 'skipped' (one outcome;
--             see record_outcomes); max_rows  1..100000 (default 100); after  the cursor of the
--             last row of the previous page (NULL: from the start); finished_since,
--             finished_until  the outcome log only: outcomes finished in this time range
--             (inclusive; NULL: unbounded)
-- Returns:    rows (consumer, state, msg_id, type, created_at, worker, since, last_heartbeat,
--             percent, stage, due_at, attempts, reason, dead_id, cursor, finished_at); the states
--             and columns mean what they mean in pglogq.lookup.  The outcome log's rows: state is
--             the outcome, since the handler's start, finished_at its end, attempts the run's
--             attempt number, reason its error, created_at NULL; newest first: by the last end
--             of the group of runs each was recorded with (a page's runs that ended alike, see
--             record_outcomes), then the order recorded, then last run of the group first; a
--             run's own finished_at may be a little older than the one listed before it (the
--             groups of concurrent workers overlap in time); within the queue's
--             history_retention.
--             Order of the rest: consumer name, then state (in-flight,
--             retry, dead, waiting), then in-flight in commit order, retry and dead by msg_id;
--             waiting: first the rest of the consumer's open batches, then the log after its
--             cursor, both in commit order, then the delayed sends by msg_id.  Pass the last
--             row's cursor as after for the next page; fewer than max_rows rows: the list is
--             complete.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ069 invalid state, max_rows or
--             cursor (or a cursor of the finished jobs given with a current state, or the reverse).
-- Tables:     event, delayed, cancelled, retry, dead_letter, progress, subscription, tick,
--             attempt, outcome (read; a row of the outcome log through _outcome_runs; open batches through _open_batch_events, retries through _retries,
--             the worker through _worker_name: a partitioned queue lists as a queue of one
--             partition does).
-- Reads only.  Each page costs index range scans from its cursor (the outcome log: a backward
-- scan of outcome_time_idx, or of outcome_failed_idx for an outcome other than done, from the
-- cursor, and the arrays of each row it lists: the same time at the first page and half-way
-- through a million outcomes; finished_until is a filter of that scan, each row newer than it
-- is read and skipped): the waiting list reads the
-- open batches and then the (ev_txid, ev_id) index from the consumer's cursor tick, so a page takes the same time on a
-- queue of a million waiting events as on an empty one; with msg_type, events of other types
-- are read and skipped (a rare type among many waiting events makes a page slower).  An open
-- batch is read from the cursor and only up to the page (see _open_batch_events), whatever its
-- size.  jit off: the estimates of a queue of millions of events passed jit_above_cost, and
-- compiling the plans (about 0.1 s) cost far more than the page.
-- Copies: answered by the queue's own copy of this function and of _open_batch_events (see
-- _queue_functions), whose plans read and lock the queue's own tick and event tables only: the
-- same locks whatever the number of queues (a generic plan over the shared tables locked every
-- queue's: 1,191 locks at 50 queues, 64 now; force_custom_plan instead also made it 64, but
-- planned every statement on every call, about twice the time of a page at 1 queue).
-- Cancelled events are left out, each by a probe of the markers' primary key: enable_seqscan is
-- off in here (and in _open_batch_events), as in _batch_page: the session's cached plans, made
-- while the queue held a marker or two, scanned the whole markers table once per event listed
-- after a mass cancel (4,100 scans, 8.4 million rows read for a page of 100 after 4,000 cancels)
-- until the next ANALYZE.  A page is a snapshot: an event can move between states (and
-- so be listed twice, or not at all) between two pages.
CREATE OR REPLACE FUNCTION pglogq.jobs(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL, in_state text DEFAULT NULL,
    max_rows integer DEFAULT 100, after text DEFAULT NULL, finished_since timestamptz DEFAULT NULL,
    finished_until timestamptz DEFAULT NULL)
RETURNS TABLE (consumer text, state text, msg_id bigint, type text, created_at timestamptz, worker text,
               since timestamptz, last_heartbeat timestamptz, percent numeric, stage text,
               due_at timestamptz, attempts integer, reason text, dead_id bigint, cursor text,
               finished_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_variable
DECLARE
    q pglogq.queue;
    only_state text := jobs.in_state;
    only_type text := jobs.msg_type;
    c pglogq.subscription;
    a_cons text;
    a_rank integer := 0;
    a_k1 numeric := 0;
    a_k2 bigint := 0;
    k1 numeric;
    k2 bigint;
    left_rows integer := jobs.max_rows;
    n integer;
    snap pg_snapshot;
    parts text[];
    held bigint[];
    log_only boolean := only_state IN ('finished', 'done', 'failed', 'cancelled', 'stopped', 'skipped');
    t_lo timestamptz;
    t_hi timestamptz;
    s_hi bigint;
    k_hi integer;
    f_lo double precision;
    f_hi double precision;
    o record;
BEGIN
    q := pglogq._queue(queue_name);
    -- queue copy: from here
    -- the queue's own copy of this function (_queue_functions, made with the queue and by its
    -- receive), whose plans read and lock its tables only; none (the queue has not received
    -- since an install changed the functions): the body below, whose plans lock every queue's
    IF to_regproc(format('pglogq.%I', '_q' || q.queue_id || '_@copies@_jobs')) IS NOT NULL THEN
        RETURN QUERY EXECUTE format('SELECT * FROM pglogq.%I($1, $2, $3, $4, $5, $6, $7, $8)',
                                    '_q' || q.queue_id || '_@copies@_jobs')
            USING queue_name, consumer_name, msg_type, in_state, max_rows, after, finished_since, finished_until;
        RETURN;
    END IF;
    -- queue copy: to here
    IF only_state IS NOT NULL AND only_state NOT IN ('in-flight', 'retry', 'dead', 'waiting') AND NOT log_only THEN
        RAISE EXCEPTION 'invalid state "%"', left(only_state, 80)
            USING ERRCODE = 'PQ069',
                  HINT = 'one of waiting, in-flight, retry, dead (or NULL: all four); finished, done, failed, '
                         'cancelled, stopped, skipped (the outcome log)';
    END IF;
    IF (finished_since IS NOT NULL OR finished_until IS NOT NULL) AND NOT coalesce(log_only, false) THEN
        RAISE EXCEPTION 'finished_since and finished_until apply to the outcome log only'
            USING ERRCODE = 'PQ069', HINT = 'pass in_state => ''finished'' (or one outcome) with them';
    END IF;
    IF left_rows IS NULL OR left_rows < 1 OR left_rows > 100000 THEN
        RAISE EXCEPTION 'invalid max_rows %: use 1..100000', coalesce(left_rows::text, 'NULL')
            USING ERRCODE = 'PQ069';
    END IF;
    IF consumer_name IS NOT NULL THEN
        PERFORM pglogq._consumer(q.queue_id, q.queue_name, consumer_name);
    END IF;
    IF after IS NOT NULL THEN
        parts := string_to_array(after, '/');
        IF cardinality(parts) <> 4 OR parts[1] !~ '^[A-Za-z][A-Za-z0-9_.-]{0,62}$' OR parts[2] !~ '^[1-7]$'
           OR parts[3] !~ '^[0-9]{1,20}$' OR parts[4] !~ '^[0-9]{1,19}$'
           OR parts[3]::numeric > 18446744073709551615 OR parts[4]::numeric > 9223372036854775807 THEN
            RAISE EXCEPTION 'invalid cursor "%"', left(after, 80)
                USING ERRCODE = 'PQ069', HINT = 'pass the cursor column of the last row of the previous page';
        END IF;
        a_cons := parts[1];
        a_rank := parts[2]::integer;
        IF (a_rank = 7) <> coalesce(log_only, false) THEN  -- a cursor of the other kind of list
            RAISE EXCEPTION 'invalid cursor "%": it continues a list of %', left(after, 80),
                CASE WHEN a_rank = 7 THEN 'finished jobs' ELSE 'current jobs' END
                USING ERRCODE = 'PQ069', HINT = 'pass the cursor with the in_state of the list it came from';
        END IF;
        a_k1 := parts[3]::numeric;
        a_k2 := parts[4]::numeric::bigint;
    END IF;
    FOR c IN SELECT * FROM pglogq.subscription s
              WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL
                AND (jobs.consumer_name IS NULL OR s.consumer_name = jobs.consumer_name)
                AND (a_cons IS NULL OR s.consumer_name >= a_cons)
              ORDER BY s.consumer_name LOOP
        IF log_only THEN
            -- rank 7: the outcome log, newest row first (a row of the log is a group of runs of
            -- one page, record_outcomes), its runs last first; the cursor is (the row's
            -- finished_at in microseconds since 1970, its seq * 131072 + the run's position in
            -- it) of the last run listed
            t_lo := greatest(coalesce(finished_since, '-infinity'), clock_timestamp() - q.history_retention);
            f_lo := extract(epoch FROM t_lo);
            f_hi := coalesce(extract(epoch FROM finished_until), 'infinity');
            IF c.consumer_name = a_cons AND a_rank = 7 THEN
                t_hi := 'epoch'::timestamptz + a_k1 * interval '1 microsecond';
                s_hi := a_k2 / 131072;
                k_hi := a_k2 % 131072;
            ELSE
                t_hi := 'infinity';
                s_hi := 9223372036854775807;
                k_hi := 131072;
            END IF;
            -- the rows, a few keys at a time (their arrays are read by the query of each row):
            -- a backward range scan of outcome_time_idx from the cursor, or of outcome_failed_idx
            -- for an outcome other than done.  finished_until bounds the rows by their first end
            -- (a row ends over a span: one that finished after finished_until may hold runs that
            -- finished before), finished_since by their last.
            FOR o IN
                SELECT x.finished_at, x.seq FROM pglogq.outcome x
                 WHERE only_state IN ('finished', 'done')
                   AND x.sub_id = c.sub_id AND x.finished_at >= t_lo AND (x.finished_at, x.seq) <= (t_hi, s_hi)
                   AND x.finished_from <= coalesce(finished_until, 'infinity')
                   AND (only_state = 'finished' OR x.outcome = 'done')
                   AND (only_type IS NULL OR x.ev_type = only_type OR only_type = ANY (x.types))
                 ORDER BY x.finished_at DESC, x.seq DESC
            LOOP
                RETURN QUERY SELECT * FROM pglogq._outcome_runs(c.consumer_name, c.sub_id, o.finished_at, o.seq,
                    CASE WHEN (o.finished_at, o.seq) = (t_hi, s_hi) THEN k_hi ELSE 131072 END,
                    f_lo, f_hi, only_type, left_rows);
                GET DIAGNOSTICS n = ROW_COUNT;
                left_rows := left_rows - n;
                IF left_rows <= 0 THEN RETURN; END IF;
            END LOOP;
            FOR o IN
                SELECT x.finished_at, x.seq FROM pglogq.outcome x
                 WHERE only_state NOT IN ('finished', 'done')
                   AND x.sub_id = c.sub_id AND x.outcome <> 'done' AND x.outcome = only_state
                   AND x.finished_at >= t_lo AND (x.finished_at, x.seq) <= (t_hi, s_hi)
                   AND x.finished_from <= coalesce(finished_until, 'infinity')
                   AND (only_type IS NULL OR x.ev_type = only_type OR only_type = ANY (x.types))
                 ORDER BY x.finished_at DESC, x.seq DESC
            LOOP
                RETURN QUERY SELECT * FROM pglogq._outcome_runs(c.consumer_name, c.sub_id, o.finished_at, o.seq,
                    CASE WHEN (o.finished_at, o.seq) = (t_hi, s_hi) THEN k_hi ELSE 131072 END,
                    f_lo, f_hi, only_type, left_rows);
                GET DIAGNOSTICS n = ROW_COUNT;
                left_rows := left_rows - n;
                IF left_rows <= 0 THEN RETURN; END IF;
            END LOOP;
            CONTINUE;
        END IF;
        -- rank 1: in the page a worker holds
        IF (only_state IS NULL OR only_state = 'in-flight') AND NOT (c.consumer_name = a_cons AND a_rank > 1) THEN
            k1 := CASE WHEN c.consumer_name = a_cons AND a_rank = 1 THEN a_k1 ELSE 0 END;
            k2 := CASE WHEN c.consumer_name = a_cons AND a_rank = 1 THEN a_k2 ELSE 0 END;
            -- the pages' events, then those nacked in them already (listed as retry or dead):
            -- the retries of their id range read once, not once per event
            RETURN QUERY
            WITH pg AS MATERIALIZED (
                SELECT e.ev_id, e.ev_type, e.ev_time, e.ev_retry, e.ev_txid,
                       coalesce(p.worker, pglogq._worker_name(h), c.consumer_name) AS worker,
                       coalesce(p.started_at, h.batch_started_at) AS since,
                       greatest(p.heartbeat_at, h.heartbeat_at) AS beat, p.percent, p.stage,
                       coalesce(a.crashes, 0) AS crashes
                  FROM pglogq._open_batch_events(q.queue_id, c.sub_id, 0, k1::text::xid8, k2,
                                                 msg_type => only_type) e
                  JOIN pglogq.subscription h ON h.sub_id = e.holder
                  LEFT JOIN pglogq.progress p ON p.sub_id = h.sub_id AND p.batch_id = h.batch_id AND p.msg_id = e.ev_id
                  LEFT JOIN pglogq.attempt a ON a.sub_id = h.sub_id AND a.msg_id = e.ev_id
                 WHERE NOT EXISTS (SELECT 1 FROM pglogq.dead_letter d WHERE d.sub_id = c.sub_id AND d.msg_id = e.ev_id)
            ), failed AS (
                SELECT r.msg_id
                  -- the ids of the page bound the look-up of its retries: a filter of membership
                  -- (each is then matched by id), not a cursor, so commit order does not matter
                  FROM (SELECT min(x.id) AS lo, max(x.id) AS hi FROM (SELECT pg.ev_id AS id FROM pg) x) b,
                       LATERAL pglogq._retries(c.sub_id, b.lo - 1, NULL, NULL, NULL, false, b.hi) r
                 WHERE b.lo IS NOT NULL
            )
            SELECT c.consumer_name, 'in-flight'::text, pg.ev_id, pg.ev_type, pg.ev_time, pg.worker, pg.since,
                   pg.beat, pg.percent, pg.stage, NULL::timestamptz, pg.ev_retry + pg.crashes + 1,
                   NULL::text, NULL::bigint, format('%s/1/%s/%s', c.consumer_name, pg.ev_txid, pg.ev_id),
                   NULL::timestamptz
              FROM pg
             WHERE NOT EXISTS (SELECT 1 FROM failed f WHERE f.msg_id = pg.ev_id)
             ORDER BY pg.ev_txid, pg.ev_id LIMIT left_rows;
            GET DIAGNOSTICS n = ROW_COUNT;
            left_rows := left_rows - n;
            IF left_rows <= 0 THEN RETURN; END IF;
        END IF;
        -- rank 2: retries due later
        IF (only_state IS NULL OR only_state = 'retry') AND NOT (c.consumer_name = a_cons AND a_rank > 2) THEN
            k2 := CASE WHEN c.consumer_name = a_cons AND a_rank = 2 THEN a_k2 ELSE 0 END;
            -- the retry table, and the streams of a partitioned queue held by a strict nack
            RETURN QUERY
            SELECT c.consumer_name, 'retry'::text, r.msg_id, r.ev_type, r.ev_time, NULL::text, r.first_failed_at,
                   NULL::timestamptz, NULL::numeric, NULL::text, r.due_at, r.attempts, r.reason, NULL::bigint,
                   format('%s/2/0/%s', c.consumer_name, r.msg_id), NULL::timestamptz
              FROM pglogq._retries(c.sub_id, k2, NULL, only_type, left_rows) r
             ORDER BY r.msg_id;
            GET DIAGNOSTICS n = ROW_COUNT;
            left_rows := left_rows - n;
            IF left_rows <= 0 THEN RETURN; END IF;
        END IF;
        -- rank 3: dead letters
        IF (only_state IS NULL OR only_state = 'dead') AND NOT (c.consumer_name = a_cons AND a_rank > 3) THEN
            k2 := CASE WHEN c.consumer_name = a_cons AND a_rank = 3 THEN a_k2 ELSE 0 END;
            RETURN QUERY
            SELECT c.consumer_name, 'dead'::text, d.msg_id, d.ev_type, d.ev_time, NULL::text, d.failed_at,
                   NULL::timestamptz, NULL::numeric, NULL::text, NULL::timestamptz, d.retry_count + 1, d.reason,
                   d.dead_id, format('%s/3/0/%s', c.consumer_name, d.msg_id), d.failed_at
              FROM pglogq.dead_letter d
             WHERE d.sub_id = c.sub_id AND d.msg_id > k2 AND (only_type IS NULL OR d.ev_type = only_type)
             ORDER BY d.msg_id LIMIT left_rows;
            GET DIAGNOSTICS n = ROW_COUNT;
            left_rows := left_rows - n;
            IF left_rows <= 0 THEN RETURN; END IF;
        END IF;
        IF only_state IS NULL OR only_state = 'waiting' THEN
            -- rank 4: in an open batch, after the page its holder was returned (not handed yet)
            IF NOT (c.consumer_name = a_cons AND a_rank > 4) THEN
                -- of the retries, only those held in a stream can be here (read once, not per row)
                held := ARRAY(SELECT r.msg_id FROM pglogq._retries(c.sub_id, held_only => true) r);
                k1 := CASE WHEN c.consumer_name = a_cons AND a_rank = 4 THEN a_k1 ELSE 0 END;
                k2 := CASE WHEN c.consumer_name = a_cons AND a_rank = 4 THEN a_k2 ELSE 0 END;
                RETURN QUERY
                SELECT c.consumer_name, 'waiting'::text, e.ev_id, e.ev_type, e.ev_time, NULL::text, NULL::timestamptz,
                       NULL::timestamptz, NULL::numeric, NULL::text, NULL::timestamptz, e.ev_retry, NULL::text,
                       NULL::bigint, format('%s/4/%s/%s', c.consumer_name, e.ev_txid, e.ev_id),
                       NULL::timestamptz
                  -- after the cursor, of the type, not cancelled, not held for its retry by a
                  -- strict nack (acknowledged up to it: listed as retry), at most a page of each
                  -- holder (the helper's read stops there)
                  FROM pglogq._open_batch_events(q.queue_id, c.sub_id, 1, k1::text::xid8, k2, left_rows,
                                                 only_type, held) e
                 ORDER BY e.ev_txid, e.ev_id LIMIT left_rows;
                GET DIAGNOSTICS n = ROW_COUNT;
                left_rows := left_rows - n;
                IF left_rows <= 0 THEN RETURN; END IF;
            END IF;
            -- rank 5: in the log after the consumer's cursor, in delivery order (the cursor tick's
            -- snapshot; every open batch lies before it); on a partitioned queue the consumer's
            -- cursor is its slowest stream's: what the stream of the event's partition passed is not
            -- waiting
            IF NOT (c.consumer_name = a_cons AND a_rank > 5) THEN
                k1 := CASE WHEN c.consumer_name = a_cons AND a_rank = 5 THEN a_k1 ELSE 0 END;
                k2 := CASE WHEN c.consumer_name = a_cons AND a_rank = 5 THEN a_k2 ELSE 0 END;
                SELECT t.tick_snapshot INTO snap FROM pglogq.tick t
                 WHERE t.queue_id = q.queue_id AND t.tick_id = c.last_tick;
                -- not visible at the cursor tick: running then (its xip, all below its xmax, so
                -- first in txid order), or from its xmax on; never scanned from its xmin, which a
                -- long transaction anywhere in the cluster holds far back
                RETURN QUERY
                SELECT c.consumer_name, 'waiting'::text, x.ev_id, x.ev_type, x.ev_time, NULL::text,
                       NULL::timestamptz, NULL::timestamptz, NULL::numeric, NULL::text, NULL::timestamptz,
                       x.ev_retry, NULL::text, NULL::bigint,
                       format('%s/5/%s/%s', c.consumer_name, x.ev_txid, x.ev_id), NULL::timestamptz
                  FROM pglogq.event x
                 WHERE x.ev_queue = q.queue_id
                   AND x.ev_txid = ANY (ARRAY(SELECT r FROM pg_snapshot_xip(snap) r))
                   AND (x.ev_txid, x.ev_id) > (k1::text::xid8, k2)
                   AND NOT pg_visible_in_snapshot(x.ev_txid, snap)
                   AND (x.ev_owner IS NULL OR x.ev_owner = c.sub_id)
                   AND (only_type IS NULL OR x.ev_type = only_type)
                   AND NOT EXISTS (SELECT 1 FROM pglogq.cancelled m
                                    WHERE m.queue_id = q.queue_id AND m.msg_id = x.ev_id)
                   AND NOT EXISTS (SELECT 1 FROM pglogq.subscription st
                                     JOIN pglogq.tick ts ON ts.queue_id = q.queue_id AND ts.tick_id = st.last_tick
                                    WHERE st.parent_id = c.sub_id
                                      AND st.stream = CASE WHEN q.urgent_lane AND x.ev_priority > 100 THEN -1
                                                           ELSE coalesce(x.ev_partition, -2 - x.ev_id % 8) END
                                      AND pg_visible_in_snapshot(x.ev_txid, ts.tick_snapshot))
                 ORDER BY x.ev_txid, x.ev_id LIMIT left_rows;
                GET DIAGNOSTICS n = ROW_COUNT;
                left_rows := left_rows - n;
                IF left_rows <= 0 THEN RETURN; END IF;
                RETURN QUERY
                SELECT c.consumer_name, 'waiting'::text, x.ev_id, x.ev_type, x.ev_time, NULL::text,
                       NULL::timestamptz, NULL::timestamptz, NULL::numeric, NULL::text, NULL::timestamptz,
                       x.ev_retry, NULL::text, NULL::bigint,
                       format('%s/5/%s/%s', c.consumer_name, x.ev_txid, x.ev_id), NULL::timestamptz
                  FROM pglogq.event x
                 WHERE x.ev_queue = q.queue_id
                   AND x.ev_txid >= greatest(pg_snapshot_xmax(snap), k1::text::xid8)
                   AND (x.ev_txid, x.ev_id) > (k1::text::xid8, k2)
                   AND NOT pg_visible_in_snapshot(x.ev_txid, snap)
                   AND (x.ev_owner IS NULL OR x.ev_owner = c.sub_id)
                   AND (only_type IS NULL OR x.ev_type = only_type)
                   AND NOT EXISTS (SELECT 1 FROM pglogq.cancelled m
                                    WHERE m.queue_id = q.queue_id AND m.msg_id = x.ev_id)
                   AND NOT EXISTS (SELECT 1 FROM pglogq.subscription st
                                     JOIN pglogq.tick ts ON ts.queue_id = q.queue_id AND ts.tick_id = st.last_tick
                                    WHERE st.parent_id = c.sub_id
                                      AND st.stream = CASE WHEN q.urgent_lane AND x.ev_priority > 100 THEN -1
                                                           ELSE coalesce(x.ev_partition, -2 - x.ev_id % 8) END
                                      AND pg_visible_in_snapshot(x.ev_txid, ts.tick_snapshot))
                 ORDER BY x.ev_txid, x.ev_id LIMIT left_rows;
                GET DIAGNOSTICS n = ROW_COUNT;
                left_rows := left_rows - n;
                IF left_rows <= 0 THEN RETURN; END IF;
            END IF;
            -- rank 6: delayed sends not due yet (every consumer subscribed when they are due gets them)
            k2 := CASE WHEN c.consumer_name = a_cons AND a_rank = 6 THEN a_k2 ELSE 0 END;
            RETURN QUERY
            SELECT c.consumer_name, 'waiting'::text, d.msg_id, d.ev_type, d.ev_time, NULL::text, NULL::timestamptz,
                   NULL::timestamptz, NULL::numeric, NULL::text, d.deliver_at, 0, NULL::text, NULL::bigint,
                   format('%s/6/0/%s', c.consumer_name, d.msg_id), NULL::timestamptz
              FROM pglogq.delayed d
             WHERE d.queue_id = q.queue_id AND d.msg_id > k2 AND (only_type IS NULL OR d.ev_type = only_type)
             ORDER BY d.msg_id LIMIT left_rows;
            GET DIAGNOSTICS n = ROW_COUNT;
            left_rows := left_rows - n;
            IF left_rows <= 0 THEN RETURN; END IF;
        END IF;
    END LOOP;
END $$;
