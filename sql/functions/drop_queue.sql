-- pglogq.drop_queue(queue_name, force): drop a queue, its events and everything about it.
-- Parameters: queue_name; force  drop even if consumers are subscribed or events are stored
-- Returns:    true if dropped, false if there was no such queue.
-- Raises:     PQ004 invalid name; PQ074 (even with force) a table is captured into the queue
--             (pglogq.capture_table): uncapture it first; PQ013 (without force) the queue is still in use: it has
--             consumers (their retries and dead letters go with them), or it stores events a
--             consumer subscribing now would receive: delayed events not yet moved to the log,
--             or events in the log committed after the last tick and not cancelled.  Events
--             already ticked are not counted: with no consumer left, nobody is waiting for them
--             (a new consumer starts after them).
-- Tables:     queue and everything referencing it (cascade: its tick rows too), event partitions
--             (dropped), its copies of receive's functions (_queue_functions).  Its empty tick
--             partitions are dropped later by maint_rotate_meta (a DROP here would lock the
--             parent tick table, which receive of any queue reads before the event table: a
--             deadlock with the event table's lock taken here).
-- Locks, in this order (the order every other call takes them in): the queue name's advisory
-- lock, exclusive (waits for every open transaction that has called a function of this queue;
-- calls made meanwhile wait, then get PQ001), the registry advisory lock, then the event table
-- ACCESS EXCLUSIVE (as the DROP does anyway) before any row of the queue is locked, so a ticker
-- pass, which takes the event table first too, never deadlocks with it.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq.drop_queue(queue_name text, force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    q pglogq.queue;
    nsub integer;
    last_snap pg_snapshot;
    stored text;
BEGIN
    PERFORM pglogq._check_name(queue_name, 'queue', 48);
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.queue'), hashtext(drop_queue.queue_name));
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_name = drop_queue.queue_name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- a captured table would fail every write once its queue is gone: refused even with force
    stored := (SELECT string_agg(DISTINCT c.table_name::text, ', ') FROM pglogq.captured_tables(q.queue_name) c);
    IF stored IS NOT NULL THEN
        RAISE EXCEPTION 'queue "%" receives the changes of table(s) %', q.queue_name, stored
            USING ERRCODE = 'PQ074',
                  HINT = 'stop capturing first: SELECT pglogq.uncapture_table(''<table>'', queue_name => '''
                         || q.queue_name || '''); nothing was changed';
    END IF;
    IF NOT coalesce(force, false) THEN
        SELECT count(*) INTO nsub FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL;
        IF nsub > 0 THEN
            RAISE EXCEPTION 'queue "%" still has % consumer(s)', q.queue_name, nsub
                USING ERRCODE = 'PQ013', HINT = 'unsubscribe them first, or pass force => true';
        END IF;
        SELECT t.tick_snapshot INTO last_snap FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
        SELECT concat_ws(', ',
                   CASE WHEN EXISTS (SELECT 1 FROM pglogq.delayed d WHERE d.queue_id = q.queue_id)
                        THEN 'delayed events' END,
                   CASE WHEN EXISTS (SELECT 1 FROM pglogq.event e
                                      WHERE e.ev_queue = q.queue_id AND e.ev_owner IS NULL
                                        AND (last_snap IS NULL
                                             OR (e.ev_txid >= pg_snapshot_xmin(last_snap)
                                                 AND NOT pg_visible_in_snapshot(e.ev_txid, last_snap)))
                                        AND NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                                         WHERE c.queue_id = q.queue_id AND c.msg_id = e.ev_id))
                        THEN 'events not ticked yet' END)
          INTO stored;
        IF stored <> '' THEN
            RAISE EXCEPTION 'queue "%" still stores undelivered events: %', q.queue_name, stored
                USING ERRCODE = 'PQ013',
                      HINT = 'cancel them, or wait for the delayed ones and tick, or pass force => true';
        END IF;
    END IF;
    LOCK TABLE ONLY pglogq.event IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('DROP TABLE pglogq.%I', 'event_' || q.queue_id);
    EXECUTE format('DROP SEQUENCE pglogq.%I', 'event_' || q.queue_id || '_seq');
    PERFORM pglogq._queue_functions(q.queue_id, false);  -- its copies of receive's functions
    DELETE FROM pglogq.queue WHERE queue_id = q.queue_id;
    RETURN true;
END $$;
