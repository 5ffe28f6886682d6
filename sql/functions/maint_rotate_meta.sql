-- pglogq.maint_rotate_meta(force): rotate the metadata written on the hot path, so that it never
-- piles up dead tuples, even under a long transaction (a held xmin).
-- Parameters: force  rotate now, whenever the last switch was
-- Returns:    true if the metadata epoch was switched, false if not due (or another session is
--             switching it, or the call is not in a READ COMMITTED transaction).  Due: 10 s
--             after the last switch while something holds the xmin horizon back, else 5
--             minutes after it (pglogq._meta_due).
-- Raises:     nothing of its own.
-- Tables:     sub_state (the new epoch's partition TRUNCATEd, then every row moved into it),
--             tick (the oldest slot of each queue TRUNCATEd when no one needs a tick in it; a
--             retain_tick stored there is copied to the current slot first; the empty tick
--             partitions of dropped queues dropped), subscription (read), stream_mark (compacted:
--             TRUNCATEd and its live rows written back as they were), tick_head (read: each
--             queue's newest tick; compacted by maint_compact_head, in a transaction of its own).
-- The metadata epoch is the sequence pglogq.meta_epoch (meta_epoch_time: the unix time of the last
-- switch); a new tick goes to slot epoch % 3 of its queue.  A switch from epoch e to e + 1 first
-- empties slot (e + 1) % 3 of each queue, the oldest (written two to three epochs ago), so that
-- it is empty when it becomes current -- only when every consumer cursor, every open batch's two
-- ticks and the queue's newest tick are newer than the slot's newest tick (a slow consumer keeps
-- the slot; it is tried again at the next switch), under the slot's ACCESS EXCLUSIVE lock taken
-- within a short lock_timeout (see below) and under the queue's cursor lock (no seek or
-- subscribe in progress).  The holder state (pglogq.sub_state, partition epoch % 2) is moved
-- whole into the new epoch's partition, emptied by TRUNCATE first (it holds the versions the
-- previous switch moved out), under both partitions' ACCESS EXCLUSIVE locks (if they are not
-- granted the rows stay and the next switch moves them): a dead version lives two epochs at most,
-- and a snapshot taken before a move still finds the rows it moved until the next switch.  Every
-- lock is waited for at most the caller's lock_timeout, capped at 100 ms (also when none is
-- set): the state partitions are held while the tick slots are locked, and a reader may hold a
-- tick slot while it waits for the state (queue_info reads the ticks first), so this call must
-- give up before the deadlock detector (deadlock_timeout, 1 s by default) picks a victim; and it
-- stops locking tick slots after the first refusal or after 300 ms.  What it gives up is retried
-- at the next switch.  The marks of partitioned consumers' streams (pglogq.stream_mark: an insert
-- and a delete per receive on a partitioned queue) are compacted under the same locks: the live
-- marks are read, the table TRUNCATEd, and they are written back unchanged (same seq), so a held
-- snapshot leaves at most one epoch of dead marks behind, as it does of holder state.  Nobody
-- reads the marks without the holder state first, so the state's locks keep them out; a
-- read-only statement whose snapshot predates the switch finds no marks, and the only one
-- (_slowest_tick) then counts the consumers' cursors alone, which are never ahead of a marked
-- stream's.  The only owner of tick removal, of moving the holder state and of compacting marks.
CREATE OR REPLACE FUNCTION pglogq.maint_rotate_meta(force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    e bigint;
    slot smallint;
    q pglogq.queue;
    tab text;
    top bigint;
    newest bigint;
    slow bigint;
    old_timeout text;
    new_part smallint;
    deadline timestamptz;
    marks pglogq.stream_mark[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE WARNING 'metadata rotation skipped: it must run in a READ COMMITTED transaction, not %',
            upper(current_setting('transaction_isolation'));
        RETURN false;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('pglogq.meta'), 0) THEN
        RETURN false;
    END IF;
    e := coalesce(pg_sequence_last_value('pglogq.meta_epoch'), 0);
    -- due by the one rule (pglogq._meta_due: 10 s while the xmin horizon is held back, else 5 min)
    IF NOT coalesce(force, false) AND NOT pglogq._meta_due() THEN
        RETURN false;
    END IF;
    slot := ((e + 1) % 3)::smallint;
    old_timeout := current_setting('lock_timeout');
    IF old_timeout::interval = interval '0' OR old_timeout::interval > interval '100 ms' THEN
        PERFORM set_config('lock_timeout', '100ms', true);
    END IF;
    -- the holder state first (before any tick slot is locked: receive reads the state, then the
    -- ticks).  The partition of the new epoch holds only the dead versions left by the previous
    -- switch's move (at least one epoch ago): it is TRUNCATEd; then every row of the other one is
    -- moved into it (UPDATE of state_part: a delete there, an insert here).  The moved-from
    -- versions stay until the next switch, so that a statement whose snapshot predates this
    -- move -- a READ COMMITTED statement that took its snapshot and then waited for this lock
    -- inside a read-only function, or a REPEATABLE READ transaction -- still finds every row as
    -- it was; only a snapshot older than the previous switch can find none (pglogq._state_check
    -- refuses it outside READ COMMITTED).  The ACCESS EXCLUSIVE locks wait for every transaction
    -- that has read or written the state (their locks cover both partitions) and keep new ones
    -- out until this one commits, so no writer races the move; a statement that starts after
    -- the commit finds the moved row, and a writer whose snapshot is older gets 40001.
    new_part := ((e + 1) % 2)::smallint;
    BEGIN
        -- in partition order (0, then 1), the order in which every query on sub_state locks them:
        -- the other order deadlocks with any receive that holds one and waits for the other,
        -- and then this lock gives up (lock_timeout) at every switch into partition 1
        LOCK TABLE pglogq.sub_state_0, pglogq.sub_state_1, pglogq.stream_mark IN ACCESS EXCLUSIVE MODE;
        -- live rows here only if an earlier switch could not move them: then they stay
        IF NOT EXISTS (SELECT 1 FROM pglogq.sub_state st WHERE st.state_part = new_part) THEN
            EXECUTE format('TRUNCATE pglogq.%I', 'sub_state_' || new_part);
        END IF;
        UPDATE pglogq.sub_state st SET state_part = new_part WHERE st.state_part <> new_part;
        -- the marks, only when the statistics count dead ones (a queue without partitions writes
        -- none): a TRUNCATE renews the table's files, which is not free either
        IF pg_stat_get_dead_tuples('pglogq.stream_mark'::regclass) > 0 THEN
            marks := ARRAY(SELECT m FROM pglogq.stream_mark m);
            TRUNCATE pglogq.stream_mark;
            INSERT INTO pglogq.stream_mark (consumer_id, stream, tick_id, since_tick, epoch, seq)
            SELECT m.consumer_id, m.stream, m.tick_id, m.since_tick, m.epoch, m.seq FROM unnest(marks) m;
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        -- the rows stay where they are (readers find them in either partition): next switch
        NULL;
    END;
    deadline := clock_timestamp() + interval '300 ms';
    FOR q IN SELECT * FROM pglogq.queue x ORDER BY x.queue_id LOOP
        -- the state partition stays locked meanwhile: keep that short (queues left are done at
        -- the next switch)
        EXIT WHEN clock_timestamp() > deadline;
        -- a seek or subscribe in progress holds this lock shared: its cursor is not visible yet
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtext('pglogq.cursor'), q.queue_id);
        tab := format('pglogq.%I', 'tick_' || q.queue_id || '_' || slot);
        BEGIN
            EXECUTE 'LOCK TABLE ' || tab || ' IN ACCESS EXCLUSIVE MODE';
            EXECUTE 'SELECT max(t.tick_id) FROM ' || tab || ' t' INTO top;
            CONTINUE WHEN top IS NULL;
            -- the queue's newest tick from its tick_head row (else its own tick table): a static
            -- read of pglogq.tick here went generic after five queues, and a generic plan locks
            -- every queue's tick partitions (out of shared memory at ~1,000 queues)
            SELECT h.tick_id INTO newest FROM pglogq.tick_head h WHERE h.queue_id = q.queue_id;
            IF newest IS NULL THEN
                EXECUTE format('SELECT max(t.tick_id) FROM pglogq.%I t', 'tick_' || q.queue_id) INTO newest;
            END IF;
            CONTINUE WHEN newest <= top;
            CONTINUE WHEN EXISTS (SELECT 1 FROM pglogq.subscription s
                                   WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL AND s.last_tick IS NULL);
            slow := pglogq._slowest_tick(q.queue_id);
            CONTINUE WHEN slow <= top
                OR EXISTS (SELECT 1 FROM pglogq.subscription s
                            WHERE s.queue_id = q.queue_id AND s.batch_cur_tick <= top);
            SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = q.queue_id;
            IF q.retain_tick <= top THEN
                -- keep seek's earliest point: copy its tick into the current slot
                EXECUTE format('INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot,'
                               ' tick_event_seq, tick_event_total, tick_slot)'
                               ' SELECT t.queue_id, t.tick_id, t.tick_time, t.tick_snapshot, t.tick_event_seq,'
                               ' t.tick_event_total, $2 FROM %s t WHERE t.tick_id = $1', tab)
                  USING q.retain_tick, (e % 3)::smallint;
            END IF;
            EXECUTE 'TRUNCATE ' || tab;
        EXCEPTION WHEN lock_not_available THEN
            EXIT;  -- the slot keeps its ticks, and the queues left wait for the next switch
        END;
    END LOOP;
    -- tick partitions of dropped queues (drop_queue leaves them, empty): DROP locks the parent
    -- tick table, so only when it is free at once; else at a later switch
    FOR tab IN SELECT c.relname FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
                WHERE i.inhparent = 'pglogq.tick'::regclass
                  AND NOT EXISTS (SELECT 1 FROM pglogq.queue x WHERE 'tick_' || x.queue_id = c.relname) LOOP
        BEGIN
            EXECUTE format('DROP TABLE pglogq.%I', tab);
        EXCEPTION WHEN lock_not_available THEN
            EXIT;
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', old_timeout, true);
    PERFORM setval('pglogq.meta_epoch', e + 1, true);
    PERFORM setval('pglogq.meta_epoch_time', extract(epoch FROM clock_timestamp())::bigint, true);
    RETURN true;
END $$;
