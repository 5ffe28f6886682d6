-- pglogq.queue_info(for_queue): one row per queue (or one queue) for monitoring.
-- Parameters: for_queue  a queue name, NULL for all queues
-- Returns:    queue_name, paused, last_tick_id, last_tick_time, last_tick_age, ticker_lag
--             (age of the oldest committed event not yet ticked, at most the time since the last
--             tick: 0 when none), events_per_second
--             (events ticked during the last minute of wall-clock time, divided by 60: it decays
--             to 0 within a minute after the producers stop), pending_estimate (committed events not yet ticked,
--             counted: the next tick's batch, as far as committed now),
--             consumers, retry_depth, dead_letters, delayed, size_bytes, rotation_period,
--             last_rotation, rotation_blocked_by (the consumer holding rotation back, if any, or
--             the oldest transaction holding an xid, in any database of the server: 'transaction
--             of pid N in database "d" (xid age A, open since T)' or 'prepared transaction 'g' in
--             database "d" since T (xid age A)').
-- Tables:     queue, tick_head, tick, subscriber, subscription, retry, dead_letter_count, delayed, event,
--             the queue's id sequence (read).
-- Plans: one queue's row comes from the queue's copy (_queue_functions) when it exists, as in
-- nack (why: its header).  Else (and for a listing): custom (plan_cache_mode), so that each read of the event and tick tables is planned with
-- the queue's id and reads and locks that queue's partitions only (after five calls a generic
-- plan was chosen, which covers and locks every queue's partitions: cost and locks grew with
-- the number of queues).
-- A listing of every queue reads what every queue shares (queue, tick_head, the counts) in one
-- query, and reads a queue's own tables only where they can change its row, every column keeping
-- its meaning: its id sequence (ids drawn past tick_head.quiet_seq: then its event tables are
-- probed for the events not yet ticked, else there are none), its ticks when events were ticked
-- in the last minute (tick_head.event_time; else its rate is 0) and tick_head cannot tell how
-- many (more than one tick of events in the last minute: see migration 0048), or rotation is
-- overdue.  Each queue's reads run in a subtransaction rolled back at its end (SQLSTATE PQ999, raised and
-- caught here only), which lets go of their locks: a listing holds the locks of one queue at a
-- time, whatever the number of queues (each queue's tables held to the end of the call ran
-- out of the lock table at 1,000 queues).  The first read of a queue's partitions in a session
-- costs about a millisecond (their relation cache entries): an idle queue costs none.
-- pending_estimate and ticker_lag cost the events not yet ticked, never the ticked backlog, for one
-- queue as for a listing: when the queue's id sequence has not moved past its tick_head's
-- quiet_seq (every event with an id up to it is in a tick, see _tick) nothing is pending and no
-- event is read; else the events after the last tick's snapshot are read through the (ev_txid,
-- ev_id) index.  enable_seqscan is off in
-- here, as in _tick: on a child without statistics (a freshly loaded million-row table) the
-- planner took a third of its rows for "after the last tick" and scanned it whole (120 ms at
-- 1,000,000 ticked events, all of them read to count none).  That setting prices every scan it
-- does not want far above jit_above_cost, so jit is off with it (else each call compiled its
-- query: half a second of JIT for a few index probes).
CREATE OR REPLACE FUNCTION pglogq.queue_info(for_queue text DEFAULT NULL)
RETURNS TABLE (queue_name text, paused boolean, last_tick_id bigint, last_tick_time timestamptz,
               last_tick_age interval, ticker_lag interval, events_per_second double precision,
               pending_estimate bigint, consumers integer, retry_depth bigint, dead_letters bigint,
               delayed bigint, size_bytes bigint, rotation_period interval, last_rotation timestamptz,
               rotation_blocked_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    r record;
    lt pglogq.tick;
    old pglogq.tick;
    slow bigint;
    xip_arr xid8[];
    mine xid8 := pg_current_xact_id_if_assigned();
    now_ts timestamptz;
    one boolean := queue_info.for_queue IS NOT NULL;  -- one queue: every probe, exact sizes
    qid integer;
    gone boolean;
    drawn bigint;
    waiting boolean;
    moving boolean;
    overdue boolean;
    counts jsonb;
BEGIN
    IF one THEN
        qid := (pglogq._queue(queue_info.for_queue)).queue_id;
        -- queue copy: from here
        IF to_regproc(format('pglogq.%I', '_q' || qid || '_@copies@_queue_info')) IS NOT NULL THEN
            RETURN QUERY EXECUTE format('SELECT * FROM pglogq.%I($1)', '_q' || qid || '_@copies@_queue_info')
                USING for_queue;
            RETURN;
        END IF;
        -- queue copy: to here
    END IF;
    -- the counts and sizes of every queue (one queue: its rows only), each grouped once, kept in a
    -- map by queue id that each queue's row looks up: joined to the queue rows, they were nested
    -- loops on the planner's estimates of the groups (a few rows), every queue against every
    -- group (1,000 queues: 1,000,000 rows compared, 0.3 s)
    SELECT coalesce(jsonb_object_agg(k.queue_id::text, jsonb_build_array(k.nc, k.nr, k.nd, k.ny, k.pages)), '{}')
      INTO counts
      FROM (SELECT u.queue_id, sum(u.nc)::bigint AS nc, sum(u.nr)::bigint AS nr, sum(u.nd)::bigint AS nd,
                   sum(u.ny)::bigint AS ny, sum(u.pages)::bigint AS pages
              FROM (-- the consumers from their identities alone (the index of consumer names)
                    SELECT s.queue_id, count(*) AS nc, 0 AS nr, 0 AS nd, 0 AS ny, 0 AS pages
                      FROM pglogq.subscriber s
                     WHERE s.parent_id IS NULL AND (NOT one OR s.queue_id = qid) GROUP BY 1
                    UNION ALL
                    SELECT rt.queue_id, 0, count(*), 0, 0, 0 FROM pglogq.retry rt
                     WHERE NOT one OR rt.queue_id = qid GROUP BY 1
                    UNION ALL
                    -- kept per consumer by the triggers of dead_letter: a million dead letters cost one row each
                    SELECT c.queue_id, 0, 0, sum(c.dead_letters), 0, 0 FROM pglogq.dead_letter_count c
                     WHERE NOT one OR c.queue_id = qid GROUP BY 1
                    UNION ALL
                    SELECT d.queue_id, 0, 0, 0, count(*), 0 FROM pglogq.delayed d
                     WHERE NOT one OR d.queue_id = qid GROUP BY 1
                    UNION ALL
                    -- a listing's sizes: the catalog's, of every event partition with its indexes and TOAST
                    SELECT substr(p.relname, 7)::integer, 0, 0, 0, 0,
                           sum(t.relpages
                               + coalesce((SELECT tc.relpages FROM pg_class tc WHERE tc.oid = t.reltoastrelid), 0)
                               + coalesce((SELECT sum(ic.relpages) FROM pg_index ix
                                             JOIN pg_class ic ON ic.oid = ix.indexrelid
                                            WHERE ix.indrelid = ANY (ARRAY[t.oid, t.reltoastrelid])), 0))
                      FROM pg_class p
                      JOIN pg_inherits i ON i.inhparent = p.oid
                      JOIN pg_class t ON t.oid = i.inhrelid
                     WHERE NOT one AND p.relnamespace = 'pglogq'::regnamespace AND p.relkind = 'p'
                       AND p.relname ~ '^event_[0-9]+$'
                     GROUP BY 1) u
             GROUP BY 1) k;
    FOR r IN SELECT x.queue_id, x.queue_name, x.paused, x.rotation_period, x.switch_time, x.event_seq,
                    h.tick_id AS head_tick, h.tick_time AS head_time, h.quiet_seq, h.event_time,
                    h.tick_event_total AS head_total, h.prev_event_total, h.prev_event_time,
                    coalesce((counts -> x.queue_id::text ->> 0)::integer, 0) AS n_consumers,
                    coalesce((counts -> x.queue_id::text ->> 1)::bigint, 0) AS n_retry,
                    coalesce((counts -> x.queue_id::text ->> 2)::bigint, 0) AS n_dead,
                    coalesce((counts -> x.queue_id::text ->> 3)::bigint, 0) AS n_delayed,
                    coalesce((counts -> x.queue_id::text ->> 4)::bigint, 0) * current_setting('block_size')::bigint
                        AS catalog_size
               FROM pglogq.queue x
               LEFT JOIN pglogq.tick_head h ON h.queue_id = x.queue_id
              WHERE NOT one OR x.queue_id = qid
              ORDER BY x.queue_name LOOP
        queue_name := r.queue_name;
        paused := r.paused;
        consumers := r.n_consumers;
        retry_depth := r.n_retry;
        dead_letters := r.n_dead;
        delayed := r.n_delayed;
        size_bytes := r.catalog_size;
        rotation_period := r.rotation_period;
        last_rotation := r.switch_time;
        rotation_blocked_by := NULL;
        last_tick_id := r.head_tick;
        last_tick_time := r.head_time;
        now_ts := clock_timestamp();
        last_tick_age := now_ts - r.head_time;
        ticker_lag := interval '0';
        pending_estimate := 0;
        events_per_second := 0;
        gone := false;
        -- this queue's own tables, in a subtransaction that lets go of their locks (see the header)
        BEGIN
            -- a queue being dropped: wait for the drop (see pglogq._queue), skip it once it is gone
            PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(r.queue_name));
            gone := NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = r.event_seq);
            IF NOT gone THEN
                -- ids drawn since the last tick (sends, pumps, replays): else no event waits for a
                -- tick (see pglogq.ticker); read with SELECT, whose lock the subtransaction lets go
                -- (pg_sequence_last_value locks the sequence to the end of the transaction)
                IF r.head_tick IS NULL OR r.quiet_seq IS NULL THEN
                    waiting := true;
                ELSE
                    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s', r.event_seq)
                       INTO drawn;
                    waiting := drawn > r.quiet_seq;
                END IF;
                -- the events ticked in the last minute are those the last tick of events closed
                -- when the tick of events before it is a minute old or more, or there were none
                -- before it: the rate from tick_head (see migration 0048), no read of the ticks
                IF r.head_tick IS NOT NULL AND r.event_time > now_ts - interval '1 minute'
                   AND r.head_total IS NOT NULL AND r.prev_event_total IS NOT NULL
                   AND (r.prev_event_total = 0 OR r.prev_event_time <= now_ts - interval '1 minute') THEN
                    events_per_second := greatest(r.head_total - r.prev_event_total, 0) / 60.0;
                    moving := false;
                ELSE
                    -- events ticked in the last minute (event_time NULL: not known yet)
                    moving := one OR r.head_tick IS NULL OR r.event_time IS NULL
                              OR r.event_time > now_ts - interval '1 minute';
                END IF;
                overdue := r.n_consumers > 0 AND now_ts - r.switch_time > r.rotation_period * 2;
                IF waiting OR moving OR overdue THEN
                    SELECT * INTO lt FROM pglogq.tick t WHERE t.queue_id = r.queue_id ORDER BY t.tick_id DESC LIMIT 1;
                    last_tick_id := lt.tick_id;
                    last_tick_time := lt.tick_time;
                    last_tick_age := now_ts - lt.tick_time;
                END IF;
                IF waiting THEN
                    -- committed events the last tick does not cover: after its xmax, or of a transaction
                    -- that was running at it; other open transactions' rows are invisible
                    -- here, and this transaction's own are not committed
                    xip_arr := ARRAY(SELECT pg_snapshot_xip(lt.tick_snapshot));
                    SELECT now_ts - min(w.ev_time), count(*) INTO ticker_lag, pending_estimate
                      FROM (SELECT e.ev_time FROM pglogq.event e
                             WHERE e.ev_queue = r.queue_id AND e.ev_txid >= pg_snapshot_xmax(lt.tick_snapshot)
                               AND e.ev_txid IS DISTINCT FROM mine
                            UNION ALL
                            SELECT e.ev_time FROM pglogq.event e
                             WHERE cardinality(xip_arr) > 0 AND e.ev_queue = r.queue_id AND e.ev_txid = ANY (xip_arr)
                               AND e.ev_txid IS DISTINCT FROM mine) w;
                    -- such an event committed after the last tick's snapshot, so it has waited for the
                    -- ticker at most since then: an event sent long ago (a long transaction, a retry or a
                    -- delayed event the pump just moved, which keep their first send time) is not lag
                    ticker_lag := CASE WHEN pending_estimate = 0 THEN interval '0'
                                       ELSE greatest(least(ticker_lag, last_tick_age), interval '0') END;
                END IF;
                IF moving THEN
                    -- a wall-clock window, not the span between two ticks: the baseline is the last tick at
                    -- least a minute old (else the queue's first tick), the divisor always 60 s, so ten
                    -- events sent in one burst read 0.17/s, not thousands, and the rate falls to 0 once the
                    -- minute after the last send has passed
                    SELECT * INTO old FROM pglogq.tick t
                     WHERE t.queue_id = r.queue_id AND t.tick_time <= now_ts - interval '1 minute'
                     ORDER BY t.tick_time DESC, t.tick_id DESC LIMIT 1;  -- one probe of tick_time_idx
                    IF old.tick_id IS NULL THEN
                        SELECT * INTO old FROM pglogq.tick t WHERE t.queue_id = r.queue_id ORDER BY t.tick_id LIMIT 1;
                    END IF;
                    events_per_second := greatest(coalesce(lt.tick_event_total - old.tick_event_total, 0), 0) / 60.0;
                END IF;
                IF one THEN
                    SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) INTO size_bytes
                      FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                     WHERE p.relname = 'event_' || r.queue_id AND p.relnamespace = 'pglogq'::regnamespace;
                END IF;
                slow := CASE WHEN overdue THEN pglogq._slowest_tick(r.queue_id) END;
                IF slow IS NOT NULL THEN
                    SELECT format('consumer %s (at tick %s, %s behind)', s.consumer_name, slow,
                                  date_trunc('second', clock_timestamp() - t.tick_time))
                      INTO rotation_blocked_by
                      FROM pglogq.subscription s JOIN pglogq.tick t ON t.queue_id = s.queue_id AND t.tick_id = slow
                     WHERE s.queue_id = r.queue_id AND least(s.last_tick, s.batch_prev_tick) = slow
                     LIMIT 1;
                    -- a consumer at the latest tick is not behind: then (as when its tick is recent) the
                    -- blocker is the oldest transaction holding an xid, which pins every new tick's xmin
                    -- (a read-only snapshot has no xid and does not block rotation).  Tick snapshots are
                    -- the server's: a transaction of ANY database of the server pins them, so the text
                    -- names its database, else an operator looking in this one finds no such pid.  The
                    -- xid age needs no privilege; xact_start is NULL unless the function's owner may see
                    -- that session's details (superuser, pg_read_all_stats, or the session's own role).
                    IF rotation_blocked_by IS NULL OR slow >= lt.tick_id
                       OR clock_timestamp() - (SELECT t.tick_time FROM pglogq.tick t
                            WHERE t.queue_id = r.queue_id AND t.tick_id = slow) < r.rotation_period THEN
                        rotation_blocked_by := coalesce(
                            (SELECT x.what FROM (
                                SELECT format('transaction of pid %s%s (xid age %s%s)', a.pid,
                                              coalesce(format(' in database "%s"', replace(a.datname, '"', '""')), ''),
                                              age(a.backend_xid),
                                              coalesce(', open since ' || date_trunc('second', a.xact_start), ''))
                                           AS what,
                                       age(a.backend_xid) AS old
                                  FROM pg_stat_activity a WHERE a.backend_xid IS NOT NULL
                                UNION ALL
                                SELECT format('prepared transaction %L in database "%s" since %s (xid age %s)', p.gid,
                                              replace(p.database, '"', '""'), date_trunc('second', p.prepared),
                                              age(p.transaction)),
                                       age(p.transaction)
                                  FROM pg_prepared_xacts p) x
                              ORDER BY x.old DESC LIMIT 1),
                            rotation_blocked_by);
                    END IF;
                END IF;
            END IF;
            RAISE SQLSTATE 'PQ999';
        EXCEPTION
            WHEN SQLSTATE 'PQ999' THEN
                NULL;  -- the rows it read are kept in the variables, its locks let go
            WHEN undefined_table THEN
                gone := true;  -- dropped while the advisory lock was waited for, its name still cached
        END;
        CONTINUE WHEN gone;
        RETURN NEXT;
    END LOOP;
END $$;
