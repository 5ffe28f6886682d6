-- pglogq.result(queue_name, consumer_name, msg_id): how the latest handler run of an event ended
-- for one consumer, with the handler's result (what a waiting client reads).
-- Parameters: queue_name; consumer_name; msg_id  an id returned by send/send_batch on that queue
-- Returns:    no row while nothing is known yet; else one row (outcome, final, attempt, worker,
--             started_at, finished_at, error, result): the latest outcome in the consumer's outcome
--             log (see record_outcomes), final when it is done, dead, cancelled or stopped (the
--             event will not run again for this consumer) and not final when it failed or was
--             skipped (it comes again).  Without a final outcome in the log, a dead letter of the
--             event answers 'dead' (attempt, error and finished_at from it) and a cancellation
--             'cancelled', both final: a consumer that records no outcomes (a SQL-only one) or a
--             cancel before any receive leave no row in the log.  result is the handler's JSON
--             value (NULL: none stored).  Rows older than the queue's history_retention are left
--             out.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ021 msg_id was never issued by this
--             queue.
-- Tables:     outcome, dead_letter, cancelled, subscription, queue (read).
-- Reads only, index look-ups (the event's rows of the log through _event_outcomes, dead_letter_msg_uq, the cancelled key): a waiting
-- client calls it once, and again at each NOTIFY "pglogq.outcome.<queue>" naming the consumer.
CREATE OR REPLACE FUNCTION pglogq.result(queue_name text, consumer_name text, msg_id bigint)
RETURNS TABLE (outcome text, final boolean, attempt integer, worker text, started_at timestamptz,
               finished_at timestamptz, error text, result jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    q pglogq.queue;
    c pglogq.subscription;
    wanted bigint := result.msg_id;
    o record;
    d pglogq.dead_letter;
BEGIN
    q := pglogq._queue(queue_name);
    c := pglogq._consumer(q.queue_id, q.queue_name, consumer_name);
    IF wanted IS NULL OR wanted < 1 OR wanted > coalesce(pg_sequence_last_value(q.event_seq), 0) THEN
        RAISE EXCEPTION 'unknown message % on queue "%"', coalesce(wanted::text, 'NULL'), q.queue_name
            USING ERRCODE = 'PQ021', HINT = 'this queue has never issued that id';
    END IF;
    SELECT * INTO o FROM pglogq._event_outcomes(c.sub_id, wanted, clock_timestamp() - q.history_retention) x
     ORDER BY x.finished_at DESC, x.seq DESC LIMIT 1;
    IF FOUND AND o.outcome IN ('done', 'dead', 'cancelled', 'stopped') THEN
        RETURN QUERY SELECT o.outcome, true, o.attempt, o.worker, o.started_at, o.finished_at, o.error, o.result;
        RETURN;
    END IF;
    SELECT * INTO d FROM pglogq.dead_letter x WHERE x.sub_id = c.sub_id AND x.msg_id = wanted;
    IF FOUND THEN
        RETURN QUERY SELECT 'dead'::text, true, d.retry_count + 1, NULL::text, NULL::timestamptz, d.failed_at,
                            d.reason, NULL::jsonb;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM pglogq.cancelled x WHERE x.queue_id = q.queue_id AND x.msg_id = wanted) THEN
        RETURN QUERY SELECT 'cancelled'::text, true, NULL::integer, NULL::text, NULL::timestamptz,
                            NULL::timestamptz, NULL::text, NULL::jsonb;
        RETURN;
    END IF;
    IF o.outcome IS NOT NULL THEN
        RETURN QUERY SELECT o.outcome, false, o.attempt, o.worker, o.started_at, o.finished_at, o.error, o.result;
    END IF;
END $$;
