-- pglogq.schedule_fire(queue_name, name, due_at, next_due): the ticker's step of a schedule: send
-- the event of one due time (or skip it) and move the schedule on to the next, in one transaction.
-- Parameters: queue_name; name; due_at  the due time to handle: the schedule's next_due (NULL:
--             only plan, when next_due is not set yet); next_due  the due time after due_at,
--             computed by the caller from the cron expression (must be later than due_at)
-- Returns:    'sent' (msg_id: the event), 'skipped' (the schedule's policy is 'skip' and due_at
--             is more than a minute in the past: not sent), 'planned' (next_due set), or 'stale'
--             (due_at is not the schedule's next due time: another ticker handled it already, or
--             the schedule was removed; nothing changed).
-- Raises:     PQ066 next_due not after due_at (or NULL); PQ001 unknown queue.
-- Tables:     schedule (lock, update), schedule_run (insert, delete of runs beyond the last 100),
--             event (insert, through send).
-- Exactly once: the schedule's row is locked, due_at must equal its next_due, and the due time is
-- recorded in schedule_run (primary key: schedule and due time) in the transaction that sends:
-- two tickers handling the same due time (a failover, a restart) send one event.
CREATE OR REPLACE FUNCTION pglogq.schedule_fire(queue_name text, name text, due_at timestamptz,
                                                next_due timestamptz, OUT outcome text, OUT msg_id bigint)
RETURNS record LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    s pglogq.schedule;
BEGIN
    q := pglogq._queue(queue_name);
    IF next_due IS NULL OR next_due IN ('infinity', '-infinity') OR (due_at IS NOT NULL AND next_due <= due_at) THEN
        RAISE EXCEPTION 'invalid next due time % after %', coalesce(next_due::text, 'NULL'), coalesce(due_at::text, 'NULL')
            USING ERRCODE = 'PQ066';
    END IF;
    SELECT * INTO s FROM pglogq.schedule x WHERE x.queue_id = q.queue_id AND x.name = schedule_fire.name FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'stale';
        RETURN;
    END IF;
    IF due_at IS NULL THEN
        IF s.next_due IS NOT NULL THEN
            outcome := 'stale';
            RETURN;
        END IF;
        UPDATE pglogq.schedule x SET next_due = schedule_fire.next_due WHERE x.schedule_id = s.schedule_id;
        outcome := 'planned';
        RETURN;
    END IF;
    IF s.next_due IS DISTINCT FROM due_at THEN
        outcome := 'stale';
        RETURN;
    END IF;
    -- the due time's key first: if it was handled before (next_due moved back by hand), nothing is sent
    INSERT INTO pglogq.schedule_run (schedule_id, due_at) VALUES (s.schedule_id, due_at) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        outcome := 'stale';
        RETURN;
    END IF;
    IF s.missed = 'skip' AND due_at < clock_timestamp() - interval '1 minute' THEN
        outcome := 'skipped';
    ELSE
        outcome := 'sent';
        msg_id := pglogq.send(q.queue_name, s.ev_payload, s.ev_type,
                              coalesce(s.ev_headers, '{}'::jsonb)
                              || jsonb_build_object('pglogq_schedule', s.name,
                                                    'pglogq_due', to_char(due_at AT TIME ZONE 'UTC',
                                                                          'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
                              s.ev_priority);
        UPDATE pglogq.schedule_run r SET msg_id = schedule_fire.msg_id
         WHERE r.schedule_id = s.schedule_id AND r.due_at = schedule_fire.due_at;
    END IF;
    UPDATE pglogq.schedule x
       SET next_due = schedule_fire.next_due, last_due = due_at,
           last_msg_id = coalesce(schedule_fire.msg_id, x.last_msg_id),
           sent = x.sent + (outcome = 'sent')::integer, skipped = x.skipped + (outcome = 'skipped')::integer
     WHERE x.schedule_id = s.schedule_id;
    DELETE FROM pglogq.schedule_run r
     WHERE r.schedule_id = s.schedule_id
       AND r.due_at < (SELECT k.due_at FROM pglogq.schedule_run k WHERE k.schedule_id = s.schedule_id
                        ORDER BY k.due_at DESC OFFSET 99 LIMIT 1);
END $$;
