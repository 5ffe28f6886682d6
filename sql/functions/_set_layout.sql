-- pglogq._set_layout(q, param, value): set a queue's partitions or urgent lane (through
-- set_queue_config), only while the queue is new.
-- Parameters: q  the queue row; param  'partitions' or 'urgent_lane'; value  its text form
-- Returns:    the new value as text.
-- Raises:     PQ075 invalid partition count (an integer 1..1024); PQ077 invalid urgent_lane (true or
--             false), an urgent lane with more than one partition (or the other way round), or a
--             queue that is not new: it has a consumer, or stores (or has delayed) an event.
-- Tables:     queue (update), subscriber, event, delayed (read); the queue's event table gets its
--             partition index or its urgent-event index.
-- Both decide how events are stored and read, so they are set once, before anything is sent or
-- subscribed (create_queue then set_queue_config in one transaction: what the clients' and the
-- CLI's create_queue do).  Changing them later: a new queue, see docs/concepts/partitions.md.
CREATE OR REPLACE FUNCTION pglogq._set_layout(q pglogq.queue, param text, value text)
RETURNS text LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n integer;
    lane boolean;
    qtab text := 'event_' || q.queue_id;
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
    IF EXISTS (SELECT 1 FROM pglogq.subscriber s WHERE s.queue_id = q.queue_id)
       OR EXISTS (SELECT 1 FROM pglogq.event e WHERE e.ev_queue = q.queue_id)
       OR EXISTS (SELECT 1 FROM pglogq.delayed d WHERE d.queue_id = q.queue_id) THEN
        RAISE EXCEPTION '% of queue "%" is set while the queue is new (no consumer, no event)', param, q.queue_name
            USING ERRCODE = 'PQ077',
                  HINT = 'create the queue and set it in one transaction; to change it later, make a new queue';
    END IF;
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
