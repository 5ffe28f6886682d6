-- pglogq.schedule_add(queue_name, name, cron, payload, ...): make a periodic send, driven by the ticker.
-- Parameters: queue_name; name  the schedule's name in its queue (a letter, then up to 62 letters,
--             digits or _.-); cron  a five-field cron expression (minute hour day-of-month month
--             day-of-week, in UTC), checked here for its shape only: the Python client checks it
--             in full before calling (the ticker evaluates it with the cronsim library);
--             payload  the JSON of every event; type, headers, priority  as in send;
--             missed  what to do with due times the ticker sees more than a minute late (no
--             ticker ran): 'skip' (default: not sent) or 'catch_up' (every one sent, oldest
--             first); first_due  the first due time (NULL: the ticker computes it from now)
-- Returns:    true; false when a schedule of that name exists already with the same definition
--             (nothing changed).
-- Raises:     PQ001 unknown queue; PQ066 invalid cron expression, missed policy or name;
--             PQ068 another schedule of that name exists in the queue; PQ006 payload + headers too
--             large; PQ007 invalid payload or headers; PQ019 invalid argument.
-- Tables:     schedule (insert).
-- Each event carries the headers pglogq_schedule (the name) and pglogq_due (the due time, ISO
-- 8601 in UTC) besides the given ones.
CREATE OR REPLACE FUNCTION pglogq.schedule_add(
    queue_name text, name text, cron text, payload jsonb, type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, missed text DEFAULT 'skip', first_due timestamptz DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    s pglogq.schedule;
    expr text;
BEGIN
    q := pglogq._queue(queue_name);
    IF name IS NULL OR name !~ '^[A-Za-z][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid schedule name %', CASE WHEN name IS NULL THEN 'NULL' ELSE quote_literal(left(name, 80)) END
            USING ERRCODE = 'PQ066', HINT = 'a letter, then up to 62 letters, digits or _.-';
    END IF;
    expr := btrim(regexp_replace(coalesce(cron, ''), '\s+', ' ', 'g'));
    IF expr !~ '^[A-Za-z0-9*,/?#LW-]+( [A-Za-z0-9*,/?#LW-]+){4}$' OR length(expr) > 200 THEN
        RAISE EXCEPTION 'invalid cron expression %', CASE WHEN cron IS NULL THEN 'NULL' ELSE quote_literal(left(cron, 80)) END
            USING ERRCODE = 'PQ066',
                  HINT = 'five fields: minute hour day-of-month month day-of-week, e.g. ''*/5 * * * *''';
    END IF;
    IF missed IS NULL OR missed NOT IN ('skip', 'catch_up') THEN
        RAISE EXCEPTION 'invalid missed policy %', CASE WHEN missed IS NULL THEN 'NULL' ELSE quote_literal(left(missed, 80)) END
            USING ERRCODE = 'PQ066', HINT = 'skip or catch_up';
    END IF;
    IF first_due = 'infinity' OR first_due = '-infinity' THEN
        RAISE EXCEPTION 'invalid first due time %', first_due USING ERRCODE = 'PQ066';
    END IF;
    PERFORM pglogq._check_event(payload, type, headers, priority, q.max_payload_bytes, NULL);
    SELECT * INTO s FROM pglogq.schedule x WHERE x.queue_id = q.queue_id AND x.name = schedule_add.name FOR UPDATE;
    IF FOUND THEN
        IF s.cron = expr AND s.ev_payload = payload AND s.ev_type IS NOT DISTINCT FROM type
           AND s.ev_headers IS NOT DISTINCT FROM headers AND s.ev_priority = priority AND s.missed = schedule_add.missed THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'schedule "%" exists already in queue "%" with another definition', name, q.queue_name
            USING ERRCODE = 'PQ068', HINT = 'remove it first (schedule_remove), or choose another name';
    END IF;
    INSERT INTO pglogq.schedule (queue_id, name, cron, ev_type, ev_payload, ev_headers, ev_priority, missed, next_due)
    VALUES (q.queue_id, name, expr, type, payload, headers, priority, missed, first_due)
    ON CONFLICT ON CONSTRAINT schedule_name_uq DO NOTHING;
    IF NOT FOUND THEN  -- added by a concurrent call meanwhile
        RAISE EXCEPTION 'schedule "%" exists already in queue "%"', name, q.queue_name USING ERRCODE = 'PQ068';
    END IF;
    -- the daemon's maintenance, paused while its ticker sleeps, plans it at once
    PERFORM pglogq._wake_ticker();
    RETURN true;
END $$;
