-- pglogq.create_queue(queue_name): create a queue with its rotated event tables.
-- Parameters: queue_name  ASCII name, letters/digits/_.-, at most 48 bytes
-- Returns:    true if created, false if it already existed (nothing changed).
-- Raises:     PQ004 invalid name.
-- Tables:     queue (sharded on a cluster member), cluster_node (read), tick and event
--             partitions (created: tick_<id> with its 3 rotated slots, event_<id> with its
--             ntables children), a per-queue id sequence, tick_head (insert), the queue's
--             copies of receive's functions (_queue_functions).
-- Concurrency: racing creators of one name serialise on an advisory lock; one wins.  Locks in
-- drop_queue's order: the name's advisory lock, the registry lock, then the event table.
CREATE OR REPLACE FUNCTION pglogq.create_queue(queue_name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    n integer;
    qtab text;
    first_time timestamptz;
    first_xmax xid8;
BEGIN
    PERFORM pglogq._check_name(queue_name, 'queue', 48);
    -- the name's lock (as drop_queue), then one registration at a time: no deadlock between
    -- racing creators, droppers and a ticker pass
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.queue'), hashtext(create_queue.queue_name));
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    IF EXISTS (SELECT 1 FROM pglogq.queue x WHERE x.queue_name = create_queue.queue_name) THEN
        RETURN false;
    END IF;
    -- on a cluster member the queue is sharded (its keyed sends are routed by the shard map)
    INSERT INTO pglogq.queue (queue_name, sharded)
    VALUES (create_queue.queue_name, EXISTS (SELECT 1 FROM pglogq.cluster_node))
    RETURNING * INTO q;
    qtab := 'event_' || q.queue_id;
    EXECUTE format('CREATE SEQUENCE pglogq.%I', qtab || '_seq');
    EXECUTE format('CREATE TABLE pglogq.%I PARTITION OF pglogq.event FOR VALUES IN (%s) PARTITION BY LIST (ev_slot)',
                   qtab, q.queue_id);
    FOR n IN 0 .. q.ntables - 1 LOOP
        EXECUTE format('CREATE TABLE pglogq.%I PARTITION OF pglogq.%I FOR VALUES IN (%s)'
                       ' WITH (autovacuum_vacuum_insert_threshold = -1)',
                       qtab || '_' || n, qtab, n);
    END LOOP;
    -- the events of a priority other than the default: _batch_page reads a batch without them
    -- in index order instead of sorting it (migration 0022)
    EXECUTE format('CREATE INDEX %I ON pglogq.%I (ev_txid) WHERE ev_priority <> 100', qtab || '_prio_idx', qtab);
    -- the tick partition is made apart and then attached: ATTACH locks the parent tick table in
    -- SHARE UPDATE EXCLUSIVE mode, which lets receivers and tickers of other queues go on (a
    -- CREATE ... PARTITION OF would lock it exclusively, after the event table's lock above:
    -- receive reads the ticks before the events, so that would risk a deadlock)
    EXECUTE format('CREATE TABLE pglogq.%I (LIKE pglogq.tick INCLUDING DEFAULTS) PARTITION BY LIST (tick_slot)',
                   'tick_' || q.queue_id);
    FOR n IN 0 .. 2 LOOP
        EXECUTE format('CREATE TABLE pglogq.%I PARTITION OF pglogq.%I FOR VALUES IN (%s)',
                       'tick_' || q.queue_id || '_' || n, 'tick_' || q.queue_id, n);
    END LOOP;
    EXECUTE format('ALTER TABLE pglogq.tick ATTACH PARTITION pglogq.%I FOR VALUES IN (%s)',
                   'tick_' || q.queue_id, q.queue_id);
    UPDATE pglogq.queue SET event_seq = format('pglogq.%I', qtab || '_seq')::regclass,
                            switch_step1 = pg_current_xact_id(), switch_step2 = pg_current_xact_id()
     WHERE queue_id = q.queue_id;
    -- tick 1: the starting point of every consumer that subscribes before the first event; this
    -- transaction marked running in it, so that events it sends are in the first batch after it
    INSERT INTO pglogq.tick (queue_id, tick_id, tick_snapshot, tick_event_seq, tick_event_total)
    VALUES (q.queue_id, 1, pglogq._tick_snapshot(), 0, 0)
    RETURNING tick_time, pg_snapshot_xmax(tick_snapshot) INTO first_time, first_xmax;
    -- no id drawn yet: nothing to tick until one is (see pglogq.ticker).  From the values just
    -- inserted, not a read of the tick table: a session making queues one after another gets a
    -- generic plan for such a read after five, which locks every queue's tick tables
    INSERT INTO pglogq.tick_head (queue_id, tick_id, tick_time, quiet_seq, tick_xmax, event_tick, event_time,
                                  tick_event_total)
    VALUES (q.queue_id, 1, first_time, 0, first_xmax, 1, first_time, 0);
    UPDATE pglogq.queue SET retain_tick = 1 WHERE queue_id = q.queue_id;
    -- its copies of receive's functions, which read these tables only (see _queue_functions)
    PERFORM pglogq._queue_functions(q.queue_id);
    -- a sleeping ticker wakes to count the new queue's keep-alive in its sleep
    PERFORM pglogq._wake_ticker();
    RETURN true;
END $$;
