-- pglogq.maint_rotate_step1(queue_name, force): empty the oldest event table and make it current.
-- Parameters: queue_name; force  rotate now even if rotation_period has not passed
-- Returns:    true if rotated; false if not due or not safe yet (then nothing changed).
-- Raises:     PQ001 unknown queue.
-- Tables:     queue (update), tick, subscription (read), the oldest event child (LOCK within
--             lock_timeout, default 200 ms; TRUNCATE).
-- Safe only when (a) step 2 of the previous rotation ran, in a later transaction; (b) every
-- consumer's position is past it; (c) the table can be locked within lock_timeout (the caller's,
-- else 200 ms: a pg_dump may hold it);
-- and (d), checked under that lock, no row in it is still unread by the slowest consumer.
-- (d) makes rotation exact even for a REPEATABLE READ producer that wrote into an old table.
-- Refused (false, with a WARNING) while any position cannot be resolved: a consumer's cursor, or
-- an open batch's first or last tick, that has no tick row; while a seek or subscribe of the
-- queue is in progress (their new cursor is not visible yet); while another session holds the
-- queue row; and in a transaction above READ COMMITTED (its snapshot could miss a cursor moved
-- back, or a row written, since it began).  retain_tick becomes the oldest kept tick whose
-- snapshot sees every row of the emptied table: every event after it is still stored.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq.maint_rotate_step1(queue_name text, force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
    slow bigint;
    slow_snap pg_snapshot;
    nxt smallint;
    tab text;
    unread boolean;
    old_timeout text;
    bad record;
    cand bigint[];
    snap pg_snapshot;
    lo integer;
    hi integer;
    mid integer;
    retain bigint;
BEGIN
    q := pglogq._queue(queue_name);
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE WARNING 'rotation of queue "%" skipped: it must run in a READ COMMITTED transaction, not %',
            q.queue_name, upper(current_setting('transaction_isolation'));
        RETURN false;
    END IF;
    -- SKIP LOCKED: two sessions rotating queues in opposite orders never wait on each other
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = q.queue_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF q.switch_step2 IS NULL THEN
        RETURN false;
    END IF;
    IF NOT coalesce(force, false) AND clock_timestamp() - q.switch_time < q.rotation_period THEN
        RETURN false;
    END IF;
    -- a seek or subscribe in progress holds this lock shared: its cursor is not visible yet
    IF NOT pg_try_advisory_xact_lock(hashtext('pglogq.cursor'), q.queue_id) THEN
        RETURN false;
    END IF;
    -- every position must resolve to a tick: a missing one must block, never compare as NULL
    SELECT s.consumer_name, s.worker_name, s.last_tick, s.batch_prev_tick, s.batch_cur_tick INTO bad
      FROM pglogq.subscription s
     WHERE s.queue_id = q.queue_id
       AND ((s.parent_id IS NULL
             AND (s.last_tick IS NULL
                  OR NOT EXISTS (SELECT 1 FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = s.last_tick)))
            OR (s.batch_id IS NOT NULL AND (s.batch_prev_tick IS NULL OR s.batch_cur_tick IS NULL))
            OR (s.batch_prev_tick IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = s.batch_prev_tick))
            OR (s.batch_cur_tick IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = s.batch_cur_tick)))
     LIMIT 1;
    IF FOUND THEN
        RAISE WARNING 'rotation of queue "%" refused: consumer "%"% is at a tick that is gone (cursor %, open batch % to %)',
            q.queue_name, bad.consumer_name, coalesce(format(' (worker "%s")', bad.worker_name), ''),
            coalesce(bad.last_tick::text, 'NULL'), coalesce(bad.batch_prev_tick::text, '-'),
            coalesce(bad.batch_cur_tick::text, '-')
            USING HINT = 'seek the consumer to a kept tick (pglogq.seek(..., force => true)) or unsubscribe it';
        RETURN false;
    END IF;
    slow := pglogq._slowest_tick(q.queue_id);
    IF slow IS NOT NULL THEN
        SELECT t.tick_snapshot INTO slow_snap FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = slow;
        IF slow_snap IS NULL OR pg_snapshot_xmin(slow_snap) <= q.switch_step2 THEN
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
        IF unread IS NOT false THEN
            RETURN false;
        END IF;
    END IF;
    -- the new retain_tick: the oldest kept tick (from the current one on, up to the slowest
    -- position) whose snapshot sees every row of the table about to be emptied.  Tick snapshots
    -- only grow, so a binary search over the candidates finds it.
    cand := ARRAY(SELECT t.tick_id FROM pglogq.tick t
                   WHERE t.queue_id = q.queue_id
                     AND t.tick_id >= least(coalesce(q.retain_tick, 0), coalesce(slow, q.retain_tick, 0))
                     AND (slow IS NULL OR t.tick_id <= slow)
                   ORDER BY t.tick_id);
    lo := 1;
    hi := cardinality(cand) + 1;
    WHILE lo < hi LOOP
        mid := (lo + hi) / 2;
        SELECT t.tick_snapshot INTO snap FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = cand[mid];
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM ' || tab || ' e WHERE e.ev_txid >= pg_snapshot_xmin($1)'
                || ' AND NOT pg_visible_in_snapshot(e.ev_txid, $1))'
           INTO unread USING snap;
        IF unread IS false THEN
            hi := mid;
        ELSE
            lo := mid + 1;
        END IF;
    END LOOP;
    retain := cand[lo];
    IF retain IS NULL THEN
        -- no kept tick sees every row yet (no consumer, rows not ticked): wait for a tick
        RETURN false;
    END IF;
    EXECUTE 'TRUNCATE ' || tab;
    UPDATE pglogq.queue x
       SET cur_table = nxt, switch_time = clock_timestamp(), switch_step1 = pg_current_xact_id(),
           switch_step2 = NULL, retain_tick = retain
     WHERE x.queue_id = q.queue_id;
    RETURN true;
END $$;
