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
-- Tables:     queue, tick, subscription, retry, dead_letter_count, delayed, event (read).
-- Plans: custom (plan_cache_mode), so that each read of the event and tick tables is planned with
-- the queue's id and reads and locks that queue's partitions only (after five calls a generic
-- plan was chosen, which covers and locks every queue's partitions: cost and locks grew with
-- the number of queues).
-- pending_estimate and ticker_lag cost the events not yet ticked, never the ticked backlog: when
-- the queue's id sequence has not moved past its tick_head's quiet_seq (every event with an id up
-- to it is in a tick, see _tick) nothing is pending and no event is read; else the events after
-- the last tick's snapshot are read through the (ev_txid, ev_id) index.  enable_seqscan is off in
-- here, as in _tick: on a child without statistics (a freshly loaded million-row table) the
-- planner took a third of its rows for "after the last tick" and scanned it whole (120 ms at
-- 1,000,000 ticked events, all of them read to count none).
CREATE OR REPLACE FUNCTION pglogq.queue_info(for_queue text DEFAULT NULL)
RETURNS TABLE (queue_name text, paused boolean, last_tick_id bigint, last_tick_time timestamptz,
               last_tick_age interval, ticker_lag interval, events_per_second double precision,
               pending_estimate bigint, consumers integer, retry_depth bigint, dead_letters bigint,
               delayed bigint, size_bytes bigint, rotation_period interval, last_rotation timestamptz,
               rotation_blocked_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
    lt pglogq.tick;
    old pglogq.tick;
    slow bigint;
    xip_arr xid8[];
    mine xid8 := pg_current_xact_id_if_assigned();
    now_ts timestamptz;
    head pglogq.tick_head;
BEGIN
    IF queue_info.for_queue IS NOT NULL THEN
        PERFORM pglogq._queue(queue_info.for_queue);
    END IF;
    FOR q IN SELECT * FROM pglogq.queue x
              WHERE queue_info.for_queue IS NULL OR x.queue_name = queue_info.for_queue
              ORDER BY x.queue_name LOOP
        -- a queue being dropped: wait for the drop (see pglogq._queue), skip it once it is gone
        PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(q.queue_name));
        CONTINUE WHEN to_regclass(format('pglogq.%I', 'event_' || q.queue_id || '_seq')) IS NULL;
        SELECT * INTO lt FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
        queue_name := q.queue_name;
        paused := q.paused;
        last_tick_id := lt.tick_id;
        last_tick_time := lt.tick_time;
        now_ts := clock_timestamp();
        last_tick_age := now_ts - lt.tick_time;
        -- committed events the last tick does not cover: after its xmax, or of a transaction
        -- that was running at it; other open transactions' rows are invisible
        -- here, and this transaction's own are not committed
        SELECT * INTO head FROM pglogq.tick_head h WHERE h.queue_id = q.queue_id;
        IF head.tick_id = lt.tick_id AND head.quiet_seq IS NOT NULL
           AND coalesce(pg_sequence_last_value(q.event_seq), 0) <= head.quiet_seq THEN
            -- no id drawn since the last tick, none in flight at it: nothing is pending
            pending_estimate := 0;
        ELSE
            xip_arr := ARRAY(SELECT pg_snapshot_xip(lt.tick_snapshot));
            SELECT now_ts - min(w.ev_time), count(*) INTO ticker_lag, pending_estimate
              FROM (SELECT e.ev_time FROM pglogq.event e
                     WHERE e.ev_queue = q.queue_id AND e.ev_txid >= pg_snapshot_xmax(lt.tick_snapshot)
                       AND e.ev_txid IS DISTINCT FROM mine
                    UNION ALL
                    SELECT e.ev_time FROM pglogq.event e
                     WHERE cardinality(xip_arr) > 0 AND e.ev_queue = q.queue_id AND e.ev_txid = ANY (xip_arr)
                       AND e.ev_txid IS DISTINCT FROM mine) w;
        END IF;
        -- such an event committed after the last tick's snapshot, so it has waited for the
        -- ticker at most since then: an event sent long ago (a long transaction, a retry or a
        -- delayed event the pump just moved, which keep their first send time) is not lag
        ticker_lag := CASE WHEN pending_estimate = 0 THEN interval '0'
                           ELSE greatest(least(ticker_lag, last_tick_age), interval '0') END;
        -- a wall-clock window, not the span between two ticks: the baseline is the last tick at
        -- least a minute old (else the queue's first tick), the divisor always 60 s, so ten
        -- events sent in one burst read 0.17/s, not thousands, and the rate falls to 0 once the
        -- minute after the last send has passed
        SELECT * INTO old FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_time <= now_ts - interval '1 minute'
         ORDER BY t.tick_time DESC, t.tick_id DESC LIMIT 1;  -- one probe of tick_time_idx
        IF old.tick_id IS NULL THEN
            SELECT * INTO old FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id LIMIT 1;
        END IF;
        events_per_second := greatest(coalesce(lt.tick_event_total - old.tick_event_total, 0), 0) / 60.0;
        SELECT count(*) INTO consumers FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL;
        SELECT count(*) INTO retry_depth FROM pglogq.retry r WHERE r.queue_id = q.queue_id;
        -- kept per consumer by the triggers of dead_letter: a million dead letters cost one row each
        SELECT coalesce(sum(c.dead_letters), 0) INTO dead_letters
          FROM pglogq.dead_letter_count c WHERE c.queue_id = q.queue_id;
        SELECT count(*) INTO delayed FROM pglogq.delayed d WHERE d.queue_id = q.queue_id;
        SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) INTO size_bytes
          FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
         WHERE p.relname = 'event_' || q.queue_id AND p.relnamespace = 'pglogq'::regnamespace;
        rotation_period := q.rotation_period;
        last_rotation := q.switch_time;
        rotation_blocked_by := NULL;
        slow := pglogq._slowest_tick(q.queue_id);
        IF slow IS NOT NULL AND clock_timestamp() - q.switch_time > q.rotation_period * 2 THEN
            SELECT format('consumer %s (at tick %s, %s behind)', s.consumer_name, slow,
                          date_trunc('second', clock_timestamp() - t.tick_time))
              INTO rotation_blocked_by
              FROM pglogq.subscription s JOIN pglogq.tick t ON t.queue_id = s.queue_id AND t.tick_id = slow
             WHERE s.queue_id = q.queue_id AND least(s.last_tick, s.batch_prev_tick) = slow
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
                    WHERE t.queue_id = q.queue_id AND t.tick_id = slow) < q.rotation_period THEN
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
        RETURN NEXT;
    END LOOP;
END $$;
