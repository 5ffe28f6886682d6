-- pglogq._set_layout(q, param, value): set a queue's partitions or urgent lane (through
-- set_queue_config), while the queue is new or once nothing of it is in flight.
-- Parameters: q  the queue row; param  'partitions' or 'urgent_lane'; value  its text form
-- Returns:    the new value as text.
-- Raises:     PQ075 invalid partition count (an integer 1..1024); PQ077 invalid urgent_lane (true or
--             false), an urgent lane with more than one partition (or the other way round), or
--             events in flight: an event not ticked yet, a delayed event or a retry waiting, a
--             consumer (or one of its partitions or workers) with an open batch, a nack holding
--             a partition, or an event a consumer has not received yet.
-- Tables:     queue (update: the layout, layout_epoch, retain_tick), subscriber and sub_state
--             (each consumer's partition streams replaced, its cursor at the last tick), tick,
--             event, delayed, retry (read); the queue's event table gets its partition index or
--             its urgent-event index.
-- Both decide how events are stored and read.  On a new queue they are set in the transaction
-- that creates it (what the clients' and the CLI's create_queue do).  Later, the change needs a
-- queue at rest: producers stopped, the last events ticked and received by every consumer.  Then
-- every consumer gets the streams of the new layout, all at the last tick; the change is a key
-- update of the queue row (layout_epoch), so a REPEATABLE READ producer whose snapshot predates
-- it gets 40001 rather than writing with the old partition count.  Order across a change: every
-- event sent before it was handled before it, so the order of a key holds across it.  A seek back
-- across the change is refused (PQ017): the change moves retain_tick to its tick, because the
-- events before it are stored in the old layout.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq._set_layout(q pglogq.queue, param text, value text)
RETURNS text LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    n integer;
    lane boolean;
    qtab text := 'event_' || q.queue_id;
    newest bigint;
    newest_snap pg_snapshot;
    slowest bigint;
    slowest_snap pg_snapshot;
    why text;
BEGIN
    -- the queue's name lock, exclusive: no send of this queue is running or starts meanwhile
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.queue'), hashtext(q.queue_name));
    IF param = 'partitions' THEN
        BEGIN
            n := value::integer;
        EXCEPTION WHEN data_exception THEN
            n := NULL;
        END;
        IF n IS NULL OR n < 1 OR n > 1024 THEN
            RAISE EXCEPTION 'invalid partition count "%": use 1..1024', left(value, 80) USING ERRCODE = 'PQ075';
        END IF;
        IF n > 1 AND q.urgent_lane THEN
            RAISE EXCEPTION 'queue "%" has an urgent lane: a partitioned queue cannot have one', q.queue_name
                USING ERRCODE = 'PQ077';
        END IF;
    ELSE
        BEGIN
            lane := value::boolean;
        EXCEPTION WHEN data_exception THEN
            lane := NULL;
        END;
        IF lane IS NULL THEN
            RAISE EXCEPTION 'invalid urgent_lane "%": true or false', left(value, 80) USING ERRCODE = 'PQ077';
        END IF;
        IF lane AND q.partitions > 1 THEN
            RAISE EXCEPTION 'queue "%" has % partitions: an urgent lane needs a queue of one partition',
                q.queue_name, q.partitions
                USING ERRCODE = 'PQ077', HINT = 'on a partitioned queue the order of a key comes first';
        END IF;
    END IF;
    SELECT t.tick_id, t.tick_snapshot INTO newest, newest_snap FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    -- a partition's stream without a mark counts through its consumer's cursor
    -- (see _slowest_tick)
    SELECT min(coalesce(s.batch_prev_tick, s.last_tick)) INTO slowest FROM pglogq.subscription s
     WHERE s.queue_id = q.queue_id
       AND (s.parent_id IS NULL OR s.stream < 0 OR s.batch_prev_tick IS NOT NULL
            OR (s.stream >= 0 AND EXISTS (SELECT 1 FROM pglogq.stream_mark m
                                           WHERE m.consumer_id = s.parent_id AND m.stream = s.stream)));
    SELECT t.tick_snapshot INTO slowest_snap FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id = slowest;
    why := CASE
        WHEN EXISTS (SELECT 1 FROM pglogq.delayed d WHERE d.queue_id = q.queue_id)
            THEN 'a delayed event waits'
        WHEN EXISTS (SELECT 1 FROM pglogq.retry r WHERE r.queue_id = q.queue_id)
            THEN 'a retry waits'
        WHEN EXISTS (SELECT 1 FROM pglogq.event e
                      WHERE e.ev_queue = q.queue_id AND e.ev_txid >= pg_snapshot_xmin(newest_snap)
                        AND NOT pg_visible_in_snapshot(e.ev_txid, newest_snap))
            THEN 'an event is not ticked yet'
        WHEN EXISTS (SELECT 1 FROM pglogq.subscription s
                      WHERE s.queue_id = q.queue_id
                        AND (s.batch_id IS NOT NULL OR s.hold_txid IS NOT NULL OR s.hold_until IS NOT NULL))
            THEN 'a consumer has an open batch'
        WHEN slowest IS NOT NULL AND slowest_snap IS NULL
            THEN 'a consumer is behind the kept ticks'
        WHEN slowest IS NOT NULL
             AND EXISTS (SELECT 1 FROM pglogq.event e
                          WHERE e.ev_queue = q.queue_id AND e.ev_txid >= pg_snapshot_xmin(slowest_snap)
                            AND NOT pg_visible_in_snapshot(e.ev_txid, slowest_snap))
            THEN 'a consumer has not received every event'
        END;
    IF why IS NOT NULL THEN
        RAISE EXCEPTION '% of queue "%" changes only while nothing is in flight: %', param, q.queue_name, why
            USING ERRCODE = 'PQ077',
                  HINT = 'stop the producers, tick the queue (pglogq.force_tick), let every consumer '
                         'receive and acknowledge everything, then set it; or create a new queue';
    END IF;
    -- every consumer: the streams of the new layout, each with the consumer's cursor at the last
    -- tick (nothing is in flight, so moving cursors over empty ticks skips nothing)
    DELETE FROM pglogq.subscriber s WHERE s.queue_id = q.queue_id AND s.stream IS NOT NULL;
    -- (due_tick NULL, no marks: the next receive marks the new streams, see _stream_skip)
    DELETE FROM pglogq.stream_mark m
     WHERE m.consumer_id IN (SELECT s.sub_id FROM pglogq.subscriber s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL);
    UPDATE pglogq.sub_state st SET last_tick = newest, handed_from = newest_snap, due_tick = NULL,
                                  mark_epoch = st.mark_epoch + 1
      FROM pglogq.subscriber s
     WHERE s.sub_id = st.sub_id AND s.queue_id = q.queue_id AND s.parent_id IS NULL;
    UPDATE pglogq.queue x SET layout_epoch = x.layout_epoch + 1,
                              retain_tick = greatest(coalesce(x.retain_tick, 0), newest)
     WHERE x.queue_id = q.queue_id;
    IF param = 'partitions' THEN
        q.partitions := n;
    ELSE
        q.urgent_lane := lane;
    END IF;
    WITH st AS (
        INSERT INTO pglogq.subscriber (queue_id, consumer_name, parent_id, stream)
        SELECT q.queue_id, s.consumer_name, s.sub_id, p
          FROM pglogq.subscriber s, pglogq._consumer_streams(q, s.lanes) p
         WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL
        RETURNING sub_id
    )
    INSERT INTO pglogq.sub_state (sub_id, last_tick, handed_from)
    SELECT st.sub_id, newest, newest_snap FROM st;
    IF param = 'partitions' THEN
        UPDATE pglogq.queue x SET partitions = n WHERE x.queue_id = q.queue_id;
        IF n > 1 AND to_regclass(format('pglogq.%I', qtab || '_part_idx')) IS NULL THEN
            EXECUTE format('CREATE INDEX %I ON pglogq.%I (ev_partition, ev_txid, ev_id)', qtab || '_part_idx', qtab);
        END IF;
        RETURN n::text;
    END IF;
    UPDATE pglogq.queue x SET urgent_lane = lane WHERE x.queue_id = q.queue_id;
    IF lane AND to_regclass(format('pglogq.%I', qtab || '_urgent_idx')) IS NULL THEN
        EXECUTE format('CREATE INDEX %I ON pglogq.%I (ev_txid, ev_id) WHERE ev_priority > 100',
                       qtab || '_urgent_idx', qtab);
    END IF;
    RETURN lane::text;
END $$;
