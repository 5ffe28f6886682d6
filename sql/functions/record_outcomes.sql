-- pglogq.record_outcomes(batch_id, msg_ids, attempts, started_at, ...): append how a page's handler runs ended.
-- The rest of the arguments: finished_at, outcomes, errors, results, types; the rows go to the
-- consumer's outcome log.
-- Parameters: batch_id  the holder's current batch (from receive), before its page is acknowledged;
--             msg_ids  one entry per handler run that ended (at most 100000); the arrays below
--             have the same length (NULL: every entry NULL, or the default named);
--             attempts  the run's attempt number: retry_count + 1 of the delivery (nacks and
--             crashes before it, plus this one), 1..2147483647;
--             started_at, finished_at  unix times in seconds (float8: cheaper to send than
--             timestamps); finished_at NULL: now;
--             outcomes  'done' (returned, acknowledged), 'failed' (failed, comes back), 'dead' (failed,
--             dead-lettered), 'cancelled' (cancelled after receive, before its handler started),
--             'stopped' (returned after a stop request, acknowledged), 'skipped' (not run: an earlier
--             event of its partition failed, it comes again); NULL: all 'done';
--             errors  why it failed (the last 2000 characters are kept);
--             results  a handler's return value as JSON text (at most the queue's max_result_bytes
--             bytes of that text; NULL: none); types  the events' types (for the type filter of jobs)
-- Returns:    how many outcomes were stored: 0 when the queue's history_retention is 0 (the log
--             is off).
-- Raises:     PQ008/PQ009 unknown or stale batch; PQ019 arrays of different lengths, more than
--             100000 entries, an unknown outcome, an attempt below 1 or a result that is not JSON;
--             PQ093 a result larger than max_result_bytes (nothing is stored).
-- Tables:     outcome (insert), subscription, queue (read).  NOTIFY "pglogq.outcome.<queue>"
--             with the consumer's name, at commit (once per call: result waiters look again).
-- Insert-only, one statement per page: the runtime sends it with the page's ack (the same
-- statement), so the outcomes commit exactly when the page does.  The worker is the holder's
-- name; the consumer is the holder's consumer.  What the caller says about each event is taken
-- as it is (the ids are not checked against the page: that would read every event again).
CREATE OR REPLACE FUNCTION pglogq.record_outcomes(
    batch_id bigint, msg_ids bigint[], attempts integer[], started_at double precision[],
    finished_at double precision[] DEFAULT NULL, outcomes text[] DEFAULT NULL, errors text[] DEFAULT NULL,
    results text[] DEFAULT NULL, types text[] DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
    q pglogq.queue;
    n integer := coalesce(cardinality(msg_ids), 0);
    who text;
    big integer;
BEGIN
    h := pglogq._holder(batch_id);
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = h.queue_id;
    IF n > 100000 THEN
        RAISE EXCEPTION 'too many outcomes: % (at most 100000 per call)', n USING ERRCODE = 'PQ019';
    END IF;
    IF coalesce(cardinality(attempts), -1) <> n OR coalesce(cardinality(started_at), n) <> n
       OR coalesce(cardinality(finished_at), n) <> n OR coalesce(cardinality(outcomes), n) <> n
       OR coalesce(cardinality(errors), n) <> n OR coalesce(cardinality(results), n) <> n
       OR coalesce(cardinality(types), n) <> n THEN
        RAISE EXCEPTION 'the outcome arrays differ in length (msg_ids has %)', n USING ERRCODE = 'PQ019',
            HINT = 'pass one entry per outcome in every array given (attempts is required)';
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
    IF EXISTS (SELECT 1 FROM unnest(attempts) a WHERE a IS NULL OR a < 1)
       OR EXISTS (SELECT 1 FROM unnest(msg_ids) m WHERE m IS NULL OR m < 1) THEN
        RAISE EXCEPTION 'an attempt or message id is NULL or below 1' USING ERRCODE = 'PQ019';
    END IF;
    IF results IS NOT NULL THEN
        SELECT max(octet_length(r)) INTO big FROM unnest(results) r;
        IF big > q.max_result_bytes THEN
            RAISE EXCEPTION 'a result of % bytes is larger than max_result_bytes (%) of queue "%"',
                big, q.max_result_bytes, q.queue_name
                USING ERRCODE = 'PQ093',
                      HINT = 'return less (store the rest elsewhere and return its key), or raise the '
                             'queue''s max_result_bytes';
        END IF;
    END IF;
    IF results IS NOT NULL THEN
        BEGIN  -- a subtransaction only for a page with results
            PERFORM r::jsonb FROM unnest(results) r;
        EXCEPTION WHEN invalid_text_representation THEN
            RAISE EXCEPTION 'a result is not valid JSON text' USING ERRCODE = 'PQ019';
        END;
    END IF;
    who := coalesce(pglogq._worker_name(h), h.consumer_name);
    INSERT INTO pglogq.outcome (queue_id, sub_id, msg_id, outcome, attempt, worker, ev_type, started_at,
                                finished_at, error, result)
    SELECT h.queue_id, coalesce(h.parent_id, h.sub_id), u.m, coalesce(u.o, 'done'), u.a, who, u.t,
           to_timestamp(u.s), coalesce(to_timestamp(u.f), clock_timestamp()), right(u.e, 2000), u.r::jsonb
      FROM unnest(msg_ids, attempts, started_at, finished_at, outcomes, errors, results, types)
           AS u(m, a, s, f, o, e, r, t);
    PERFORM pg_notify('pglogq.outcome.' || q.queue_name, h.consumer_name);
    RETURN n;
END $$;
