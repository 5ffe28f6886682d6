-- pglogq.maint_rotate_step1(queue_name, force): empty the oldest event table and make it current.
-- Parameters: queue_name; force  rotate now even if rotation_period has not passed
-- Returns:    true if rotated; false if not due or not safe yet (then nothing changed).
-- Raises:     PQ001 unknown queue.
-- Tables:     queue (update), the oldest event child (LOCK within lock_timeout, default 200 ms; TRUNCATE).
-- Safe only when (a) step 2 of the previous rotation ran, in a later transaction; (b) every
-- consumer's position is past it; (c) the table can be locked within lock_timeout (the caller's,
-- else 200 ms: a pg_dump may hold it);
-- and (d), checked under that lock, no row in it is still unread by the slowest consumer.
-- (d) makes rotation exact even for a REPEATABLE READ producer that wrote into an old table.
CREATE OR REPLACE FUNCTION pglogq.maint_rotate_step1(queue_name text, force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    slow bigint;
    slow_snap pg_snapshot;
    nxt smallint;
    tab text;
    unread boolean;
    old_timeout text;
BEGIN
    q := pglogq._queue(queue_name);
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = q.queue_id FOR NO KEY UPDATE;
    IF q.switch_step2 IS NULL THEN
        RETURN false;
    END IF;
    IF NOT coalesce(force, false) AND clock_timestamp() - q.switch_time < q.rotation_period THEN
        RETURN false;
    END IF;
    slow := pglogq._slowest_tick(q.queue_id);
    IF slow IS NOT NULL THEN
        SELECT t.tick_snapshot INTO slow_snap FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = slow;
        IF pg_snapshot_xmin(slow_snap) <= q.switch_step2 THEN
            RETURN false;
        END IF;
    END IF;
    nxt := (q.cur_table + 1) % q.ntables;
    tab := format('pglogq.%I', 'event_' || q.queue_id || '_' || nxt);
    -- wait a moment for the lock rather than NOWAIT: consumers and the ticker hold short
    -- ACCESS SHARE locks on every child nearly all the time under load, and NOWAIT then never
    -- succeeds (rotation starved for minutes in the chaos run).  Queued behind us, readers wait
    -- at most lock_timeout (the caller's if set, else 200 ms); a long holder (pg_dump) still wins.
    old_timeout := current_setting('lock_timeout');
    BEGIN
        IF old_timeout IN ('0', '0ms') THEN
            PERFORM set_config('lock_timeout', '200ms', true);
        END IF;
        EXECUTE 'LOCK TABLE ' || tab || ' IN ACCESS EXCLUSIVE MODE';
        PERFORM set_config('lock_timeout', old_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    IF slow IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM ' || tab || ' e WHERE e.ev_txid >= pg_snapshot_xmin($1)'
                || ' AND NOT pg_visible_in_snapshot(e.ev_txid, $1))'
           INTO unread USING slow_snap;
        IF unread THEN
            RETURN false;
        END IF;
    END IF;
    EXECUTE 'TRUNCATE ' || tab;
    UPDATE pglogq.queue x
       SET cur_table = nxt, switch_time = clock_timestamp(), switch_step1 = pg_current_xact_id(),
           switch_step2 = NULL, retain_tick = coalesce(slow, (SELECT max(tick_id) FROM pglogq.tick t
                                                               WHERE t.queue_id = q.queue_id))
     WHERE x.queue_id = q.queue_id;
    RETURN true;
END $$;
