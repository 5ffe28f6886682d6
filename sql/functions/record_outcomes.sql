-- pglogq.record_outcomes(batch_id, msg_ids, attempts, started_at, ...): append how a page's handler runs ended.
-- The rest of the arguments: finished_at, outcomes, errors, results, types, msg_type, id_range,
-- finished_range; the rows go to the consumer's outcome log.
-- Parameters: batch_id  the holder's current batch (from receive), before its page is acknowledged;
--             msg_ids  one entry per handler run that ended (at most 100000); the arrays below
--             have the same length (NULL: every entry NULL, or the default named); NULL with a
--             bounded id_range: the ids are id_range's, in order (a page of one ascending run
--             of ids: the runtime sends no ids);
--             attempts  the run's attempt number: retry_count + 1 of the delivery (nacks and
--             crashes before it, plus this one), 1..2147483647; NULL: all 1 (first deliveries);
--             started_at, finished_at  unix times in seconds (float8: cheaper to send than
--             timestamps); started_at NULL: not known; finished_at NULL: now;
--             outcomes  'done' (returned, acknowledged), 'failed' (failed, comes back), 'dead' (failed,
--             dead-lettered), 'cancelled' (cancelled after receive, before its handler started),
--             'stopped' (returned after a stop request, acknowledged), 'skipped' (not run: an earlier
--             event of its partition failed, it comes again); NULL: all 'done';
--             errors  why it failed (the last 2000 characters are kept);
--             results  a handler's return value as JSON text (at most the queue's max_result_bytes
--             bytes of that text; NULL: none); types  the events' types (for the type filter of
--             jobs; a NULL entry: msg_type); msg_type  the type of the events types does not name;
--             id_range, finished_range  the least and greatest of msg_ids, and the earliest and
--             latest of finished_at ({earliest, latest}), when the caller knows them (the
--             runtime does): they spare the server a pass over each array of the common page;
--             only their first and last entries are checked against them (a range that leaves an
--             id out hides its run from lookup and result, one that leaves an end out from the
--             time filters of jobs); NULL (or a bound NULL): computed
-- Returns:    how many outcomes were stored: 0 when the queue's history_retention is 0 (the log
--             is off).
-- Raises:     PQ008/PQ009 unknown or stale batch; PQ019 arrays of different lengths, more than
--             100000 entries, an unknown outcome, an id or attempt NULL or below 1, a result
--             that is not JSON, or an id_range or finished_range that does not hold the first
--             and last entries; PQ094 a result larger than max_result_bytes (nothing is stored).
-- Tables:     outcome (insert), subscription, queue (read).  NOTIFY "pglogq.outcome.<queue>"
--             with "<consumer> <least id> <greatest id>" of the call, at commit (result waiters
--             of an id in that range look again; the others do not).
-- Insert-only, one statement per page: the runtime sends it with the page's ack (the same
-- statement), so the outcomes commit exactly when the page does.  The worker is the holder's
-- name; the consumer is the holder's consumer.  What the caller says about each event is taken
-- as it is (the ids are not checked against the page: that would read every event again).
-- The common page (no outcomes, errors, results or attempts given: every event done on its
-- first delivery) is stored as it came, one row, its arrays untouched: its cost is the page's,
-- not its events' (the arrays are read once, for their bounds).  Any other call is grouped: one
-- row per (outcome, attempt, error, type) of the call, and one per event with a result.
CREATE OR REPLACE FUNCTION pglogq.record_outcomes(
    batch_id bigint, msg_ids bigint[], attempts integer[] DEFAULT NULL, started_at double precision[] DEFAULT NULL,
    finished_at double precision[] DEFAULT NULL, outcomes text[] DEFAULT NULL, errors text[] DEFAULT NULL,
    results text[] DEFAULT NULL, types text[] DEFAULT NULL, msg_type text DEFAULT NULL,
    id_range int8range DEFAULT NULL, finished_range double precision[] DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
    q pglogq.queue;
    n integer := coalesce(cardinality(msg_ids), 0);
    who text;
    sub integer;
    big integer;
    now_s double precision := extract(epoch FROM clock_timestamp());
    fin double precision[];
    lo bigint;
    hi bigint;
    f0 double precision;
    f1 double precision;
    k bigint;
    run boolean;
BEGIN
    h := pglogq._holder(batch_id);
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = h.queue_id;
    run := msg_ids IS NULL AND NOT (lower_inf(id_range) OR upper_inf(id_range) OR isempty(id_range));
    IF run THEN  -- the ids are id_range's, in order
        IF lower(id_range) < 1 THEN
            RAISE EXCEPTION 'a message id is NULL or below 1' USING ERRCODE = 'PQ019';
        END IF;
        n := least(upper(id_range) - lower(id_range), 100001);
    END IF;
    IF n > 100000 THEN
        RAISE EXCEPTION 'too many outcomes: % (at most 100000 per call)', n USING ERRCODE = 'PQ019';
    END IF;
    IF array_ndims(msg_ids) > 1 OR coalesce(cardinality(attempts), n) <> n OR coalesce(cardinality(started_at), n) <> n
       OR coalesce(cardinality(finished_at), n) <> n OR coalesce(cardinality(outcomes), n) <> n
       OR coalesce(cardinality(errors), n) <> n OR coalesce(cardinality(results), n) <> n
       OR coalesce(cardinality(types), n) <> n THEN
        RAISE EXCEPTION 'the outcome arrays differ in length (msg_ids has %)', n USING ERRCODE = 'PQ019',
            HINT = 'pass one entry per outcome in every array given, in one dimension';
    END IF;
    IF n = 0 OR q.history_retention = interval '0' THEN
        RETURN 0;
    END IF;
    IF outcomes IS NOT NULL AND EXISTS (
        SELECT 1 FROM unnest(outcomes) o
         WHERE o IS NULL OR o NOT IN ('done', 'failed', 'dead', 'cancelled', 'stopped', 'skipped')) THEN
        RAISE EXCEPTION 'unknown outcome in %', left(outcomes::text, 200) USING ERRCODE = 'PQ019',
            HINT = 'one of done, failed, dead, cancelled, stopped, skipped';
    END IF;
    IF attempts IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(attempts) a WHERE a IS NULL OR a < 1) THEN
        RAISE EXCEPTION 'an attempt is NULL or below 1' USING ERRCODE = 'PQ019';
    END IF;
    IF results IS NOT NULL THEN
        SELECT max(octet_length(r)) INTO big FROM unnest(results) r;
        IF big > q.max_result_bytes THEN
            RAISE EXCEPTION 'a result of % bytes is larger than max_result_bytes (%) of queue "%"',
                big, q.max_result_bytes, q.queue_name
                USING ERRCODE = 'PQ094',
                      HINT = 'return less (store the rest elsewhere and return its key), or raise the '
                             'queue''s max_result_bytes';
        END IF;
        BEGIN  -- a subtransaction only for a page with results
            PERFORM r::jsonb FROM unnest(results) r;
        EXCEPTION WHEN invalid_text_representation THEN
            RAISE EXCEPTION 'a result is not valid JSON text' USING ERRCODE = 'PQ019';
        END;
    END IF;
    -- the bounds of the ids and of the ends: given (checked at the ends of the arrays only), or
    -- one pass over each array, unnest in the select list (a set-returning function in FROM
    -- materializes its rows first: ten times slower)
    IF run THEN
        lo := lower(id_range);  -- an int8range is [lower, upper)
        hi := upper(id_range) - 1;
        k := n;
    ELSIF NOT (lower_inf(id_range) OR upper_inf(id_range)) THEN  -- neither NULL nor unbounded
        lo := lower(id_range);
        hi := upper(id_range) - 1;
        IF lo IS NULL OR NOT (msg_ids[1] BETWEEN lo AND hi AND msg_ids[n] BETWEEN lo AND hi) THEN  -- empty: NULL
            RAISE EXCEPTION 'id_range % does not hold the ids (first %, last %)', id_range, msg_ids[1], msg_ids[n]
                USING ERRCODE = 'PQ019', HINT = 'pass the least and greatest of msg_ids, or NULL';
        END IF;
        k := n - coalesce(array_position(msg_ids, NULL), 0);  -- a NULL id: k < n
    ELSE
        SELECT min(u.m), max(u.m), count(u.m) INTO lo, hi, k FROM (SELECT unnest(msg_ids) AS m) u;
    END IF;
    IF k < n OR lo < 1 THEN
        RAISE EXCEPTION 'a message id is NULL or below 1' USING ERRCODE = 'PQ019';
    END IF;
    IF finished_at IS NULL THEN  -- an unknown end is now
        fin := array_fill(now_s, ARRAY[n]);
        f0 := now_s;
        f1 := now_s;
    ELSIF finished_range[1] IS NOT NULL AND finished_range[2] IS NOT NULL
          AND array_position(finished_at, NULL) IS NULL THEN
        f0 := finished_range[1];
        f1 := finished_range[2];
        IF cardinality(finished_range) <> 2
           OR NOT (finished_at[1] BETWEEN f0 AND f1 AND finished_at[n] BETWEEN f0 AND f1) THEN
            RAISE EXCEPTION 'finished_range % does not hold the ends (first %, last %)', finished_range,
                            finished_at[1], finished_at[n]
                USING ERRCODE = 'PQ019', HINT = 'pass {earliest, latest} of finished_at, or NULL';
        END IF;
    ELSE
        SELECT min(u.f), max(u.f), count(u.f) INTO f0, f1, k FROM (SELECT unnest(finished_at) AS f) u;
        IF k < n THEN
            fin := array_replace(finished_at, NULL, now_s);
            f0 := least(f0, now_s);
            f1 := greatest(f1, now_s);
        END IF;
    END IF;
    who := coalesce(pglogq._worker_name(h), h.consumer_name);
    sub := coalesce(h.parent_id, h.sub_id);
    IF outcomes IS NULL AND errors IS NULL AND results IS NULL AND attempts IS NULL THEN
        INSERT INTO pglogq.outcome (queue_id, sub_id, outcome, attempt, worker, ev_type, finished_from,
                                    finished_at, id_range, msg_ids, started, finished, types)
        VALUES (h.queue_id, sub, 'done', 1, who, msg_type, to_timestamp(f0), to_timestamp(f1),
                int8range(lo, hi, '[]'), msg_ids, started_at, coalesce(fin, finished_at), types);
    ELSE
        IF run THEN
            msg_ids := ARRAY(SELECT generate_series(lo, hi));
        END IF;
        -- alike runs together; a run with a result on its own row (u.k: its own group)
        INSERT INTO pglogq.outcome (queue_id, sub_id, outcome, attempt, worker, ev_type, finished_from,
                                    finished_at, id_range, msg_ids, started, finished, error, result)
        SELECT h.queue_id, sub, g.o, g.a, who, g.t, to_timestamp(min(g.f)), to_timestamp(max(g.f)),
               int8range(min(g.m), max(g.m), '[]'), array_agg(g.m ORDER BY g.k), array_agg(g.s ORDER BY g.k),
               array_agg(g.f ORDER BY g.k), g.e, g.r::jsonb
          FROM (SELECT u.m, coalesce(u.a, 1) AS a, u.s, u.f, coalesce(u.o, 'done') AS o, right(u.e, 2000) AS e,
                       u.r, coalesce(u.t, msg_type) AS t, u.k,
                       CASE WHEN u.r IS NULL THEN 0 ELSE u.k END AS own
                  FROM unnest(msg_ids, attempts, started_at, coalesce(fin, finished_at), outcomes, errors, results,
                              types)
                       WITH ORDINALITY AS u(m, a, s, f, o, e, r, t, k)) g
         GROUP BY g.o, g.a, g.e, g.t, g.r, g.own;
    END IF;
    PERFORM pg_notify('pglogq.outcome.' || q.queue_name, format('%s %s %s', h.consumer_name, lo, hi));
    RETURN n;
END $$;
