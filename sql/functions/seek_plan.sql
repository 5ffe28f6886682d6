-- pglogq.seek_plan(queue_name, consumer_name, to_position, by_events): where a seek would move a consumer.
-- Parameters: queue_name; consumer_name;
--             to_position  'earliest' (the oldest tick whose later events are all still stored),
--                          'latest' (the newest tick: skip everything ticked so far),
--                          a tick id (digits; that tick must still be kept), or a timestamp
--                          (the last kept tick at or before it: events ticked after it replay)
--                          such as '2026-05-01 12:00+00' or '15 minutes ago' (before the oldest
--                          kept tick: an error, unless no event was ever sent before that tick;
--                          'infinity', '-infinity' or any time that is not finite: an error);
--             by_events    instead of to_position: move by this many events (negative:
--                          back, to replay; positive: forward, to skip), or to the kept tick
--                          nearest to that count (ticks are the boundaries a cursor can take).
--             Give exactly one of to_position and by_events.
-- Returns:    one row: current_tick (the consumer's position: its
--             cursor, or the start of its oldest open batch), current_tick_time, target_tick,
--             target_tick_time, delta_events (the events the ticks in between closed, as the
--             ticks counted them: negative = that many events are delivered again, positive =
--             that many are skipped; retried and replayed events of every consumer count),
--             earliest_tick, earliest_tick_time, latest_tick, latest_tick_time,
--             open_batches (of the consumer and its workers; seek refuses while > 0 unless forced;
--             of a share consumer: the leases out, its workers' and the events ceded and not
--             taken over yet, not the batch it is handing out, which is nobody's).
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ017 target outside what the queue
--             still keeps (rotation truncated it, or the tick was pruned); PQ019 invalid position
--             (also a time that is not finite, such as 'infinity') or not exactly one of
--             to_position / by_events.
-- Tables:     queue, subscription, tick (read).  Changes nothing: see pglogq.seek to apply.
-- Ticks older than the slowest consumer are thinned to about one a minute by maint_prune, so
-- a timestamp or by_events target lands on the nearest tick that is still kept.
-- Cost: index probes (tick_total_idx, tick_time_idx, tick_id_idx), whatever the number of kept ticks.
-- Plans: the queue's copy (_queue_functions) answers when it exists, as in nack (why: its
-- header).  Without one: custom (plan_cache_mode), so that each read of the event and tick tables is planned with
-- the queue's id and reads and locks that queue's partitions only (after five calls a generic
-- plan was chosen, which covers and locks every queue's partitions: cost and locks grew with
-- the number of queues).
CREATE OR REPLACE FUNCTION pglogq.seek_plan(
    queue_name text, consumer_name text, to_position text DEFAULT NULL, by_events bigint DEFAULT NULL)
RETURNS TABLE (current_tick bigint, current_tick_time timestamptz,
               target_tick bigint, target_tick_time timestamptz, delta_events bigint,
               earliest_tick bigint, earliest_tick_time timestamptz, latest_tick bigint,
               latest_tick_time timestamptz, open_batches integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
    c pglogq.subscription;
    cur pglogq.tick;
    tgt pglogq.tick;
    lo pglogq.tick;
    hi pglogq.tick;
    pos text := lower(btrim(to_position));
    at timestamptz;
    want bigint;
    up bigint;
    tid bigint;
    digits text;
BEGIN
    IF (to_position IS NULL) = (by_events IS NULL) THEN
        RAISE EXCEPTION 'give exactly one of to_position and by_events'
            USING ERRCODE = 'PQ019';
    END IF;
    q := pglogq._queue(queue_name);
    -- queue copy: from here
    IF to_regproc(format('pglogq.%I', '_q' || q.queue_id || '_@copies@_seek_plan')) IS NOT NULL THEN
        RETURN QUERY EXECUTE format('SELECT * FROM pglogq.%I($1, $2, $3, $4)', '_q' || q.queue_id || '_@copies@_seek_plan')
            USING queue_name, consumer_name, to_position, by_events;
        RETURN;
    END IF;
    -- queue copy: to here
    c := pglogq._consumer(q.queue_id, q.queue_name, consumer_name);
    SELECT * INTO hi FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    SELECT * INTO lo FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id >= coalesce(q.retain_tick, 0)
     ORDER BY t.tick_id LIMIT 1;
    SELECT * INTO cur FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id
       AND t.tick_id = coalesce((SELECT min(s.batch_prev_tick) FROM pglogq.subscription s
                                  WHERE s.sub_id = c.sub_id OR s.parent_id = c.sub_id), c.last_tick);
    IF lo.tick_id IS NULL OR hi.tick_id IS NULL THEN
        -- retain_tick beyond the last tick (or no tick at all): nothing to land on; never
        -- plan a NULL target, which seek would write into the cursor
        RAISE EXCEPTION 'queue "%" keeps no tick at or after % to seek to', q.queue_name, q.retain_tick
            USING ERRCODE = 'PQ017', HINT = 'tick the queue (pglogq.force_tick) and try again';
    END IF;
    IF by_events IS NOT NULL THEN
        IF cur.tick_id IS NULL THEN
            RAISE EXCEPTION 'consumer "%" is at tick %, which is no longer kept: seek it to a position instead',
                c.consumer_name, c.last_tick
                USING ERRCODE = 'PQ017', HINT = 'use to_position => ''earliest'' or ''latest''';
        END IF;
        -- compare before adding: cur + by_events could overflow bigint
        IF by_events < lo.tick_event_total - cur.tick_event_total
           OR by_events > hi.tick_event_total - cur.tick_event_total THEN
            RAISE EXCEPTION 'cannot move consumer "%" by % events: the queue keeps % to % events around it',
                c.consumer_name, by_events, lo.tick_event_total - cur.tick_event_total,
                '+' || (hi.tick_event_total - cur.tick_event_total)
                USING ERRCODE = 'PQ017',
                      HINT = format('use a value between %s and %s, or to_position => ''earliest''',
                                    lo.tick_event_total - cur.tick_event_total,
                                    hi.tick_event_total - cur.tick_event_total);
        END IF;
        want := cur.tick_event_total + by_events;
        -- the kept tick nearest to want (a tie: the later one), from the two neighbours of want
        -- on tick_total_idx (totals never decrease with the tick id): two index probes, however
        -- many ticks are kept
        SELECT * INTO tgt FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_id >= lo.tick_id AND t.tick_event_total <= want
         ORDER BY t.tick_event_total DESC, t.tick_id DESC LIMIT 1;
        SELECT t.tick_event_total INTO up FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_id >= lo.tick_id AND t.tick_event_total > want
         ORDER BY t.tick_event_total LIMIT 1;
        IF up IS NOT NULL AND (tgt.tick_id IS NULL OR up - want <= want - tgt.tick_event_total) THEN
            SELECT * INTO tgt FROM pglogq.tick t
             WHERE t.queue_id = q.queue_id AND t.tick_event_total = up
             ORDER BY t.tick_id DESC LIMIT 1;
        END IF;
    ELSIF pos = 'earliest' THEN
        tgt := lo;
    ELSIF pos = 'latest' THEN
        tgt := hi;
    ELSIF pos ~ '^[0-9]+$' THEN
        -- any tick id, even beyond bigint (no such tick: not kept), never an overflow
        digits := coalesce(nullif(ltrim(pos, '0'), ''), '0');
        tid := CASE WHEN length(digits) > 19 THEN 9223372036854775807
                    WHEN digits::numeric > 9223372036854775807 THEN 9223372036854775807
                    ELSE digits::bigint END;
        SELECT * INTO tgt FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = tid;
        IF tgt.tick_id IS NULL OR tid < lo.tick_id THEN
            RAISE EXCEPTION 'tick % of queue "%" is not kept', left(digits, 40), q.queue_name
                USING ERRCODE = 'PQ017',
                      HINT = format('kept ticks run from %s (%s) to %s; older ones are thinned to about one a minute: %s',
                                    lo.tick_id, date_trunc('second', lo.tick_time), hi.tick_id,
                                    coalesce((SELECT string_agg(x.tick_id::text, ', ' ORDER BY x.tick_id)
                                                FROM (SELECT n.tick_id FROM (
                                                        (SELECT t.tick_id FROM pglogq.tick t
                                                          WHERE t.queue_id = q.queue_id AND t.tick_id >= lo.tick_id
                                                            AND t.tick_id <= tid
                                                          ORDER BY t.tick_id DESC LIMIT 2)
                                                        UNION ALL
                                                        (SELECT t.tick_id FROM pglogq.tick t
                                                          WHERE t.queue_id = q.queue_id AND t.tick_id >= lo.tick_id
                                                            AND t.tick_id > tid
                                                          ORDER BY t.tick_id LIMIT 2)) n
                                                       ORDER BY abs(n.tick_id - tid), n.tick_id LIMIT 2) x),
                                             'none'));
        END IF;
    ELSE
        BEGIN
            IF pos ~ '\sago$' THEN
                at := clock_timestamp() + pos::interval;   -- '10 minutes ago' is a negative interval
            ELSE
                at := to_position::timestamptz;
            END IF;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'invalid seek position "%"', left(to_position, 80)
                USING ERRCODE = 'PQ019',
                      HINT = 'use earliest, latest, a tick id, a timestamp such as ''2026-05-01 12:00:00+00'''
                             ' or an age such as ''15 minutes ago''';
        END;
        IF NOT isfinite(at) THEN
            -- 'infinity' parses as a timestamp (and '-infinity', 'infinity ago'): a time no tick has
            RAISE EXCEPTION 'invalid seek position "%": not a finite time', left(to_position, 80)
                USING ERRCODE = 'PQ019',
                      HINT = 'use earliest or latest for the ends of the queue, or a real timestamp';
        END IF;
        IF at < lo.tick_time AND lo.tick_event_total > 0 THEN
            RAISE EXCEPTION 'the queue "%" keeps events from % on, not from %', q.queue_name,
                date_trunc('second', lo.tick_time), at
                USING ERRCODE = 'PQ017', HINT = 'use to_position => ''earliest'' for the oldest kept position';
        END IF;
        IF at < lo.tick_time THEN
            tgt := lo;   -- before the oldest kept tick, but no event was ever sent before it
        ELSE
            -- one probe of tick_time_idx (tick times never decrease with the tick id)
            SELECT * INTO tgt FROM pglogq.tick t
             WHERE t.queue_id = q.queue_id AND t.tick_id >= lo.tick_id AND t.tick_time <= at
             ORDER BY t.tick_time DESC, t.tick_id DESC LIMIT 1;
            IF tgt.tick_id IS NULL THEN
                tgt := lo;
            END IF;
        END IF;
    END IF;
    current_tick := coalesce(cur.tick_id, c.last_tick);
    current_tick_time := cur.tick_time;
    target_tick := tgt.tick_id;
    target_tick_time := tgt.tick_time;
    delta_events := tgt.tick_event_total - cur.tick_event_total;
    earliest_tick := lo.tick_id;
    earliest_tick_time := lo.tick_time;
    latest_tick := hi.tick_id;
    latest_tick_time := hi.tick_time;
    -- a share consumer hands its batch out from its own row (and, unpartitioned, its urgent
    -- lane's stream): no worker holds those, a seek takes nothing from under anyone there
    SELECT count(*)::integer INTO open_batches FROM pglogq.subscription s
     WHERE (s.sub_id = c.sub_id OR s.parent_id = c.sub_id) AND s.batch_id IS NOT NULL
       AND NOT (c.share AND (s.sub_id = c.sub_id OR (s.stream IS NOT DISTINCT FROM -1 AND q.partitions <= 1)));
    RETURN NEXT;
END $$;
