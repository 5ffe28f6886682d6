-- pglogq._tick(queue_id, force): write the next tick of one queue if its thresholds say so.
-- Parameters: queue_id; force  tick whatever the thresholds say (and wait for a concurrent ticker)
-- Returns:    the new tick id, or NULL when no tick was due (or another ticker holds the queue, or
--             a drop_queue of it is waiting).
-- Raises:     PQ015 the new snapshot is older than the last tick's (txids went backwards:
--             a database restored into another cluster).
-- Tables:     tick (insert; read: the last tick, unless tick_head holds it), tick_head (read;
--             insert or update: the new tick, the tick that last closed events and the one
--             before it), event
--             (count of committed, unticked events).
-- tick_event_total (cumulative per queue) grows by the number of events the new tick closes:
-- those whose transaction is visible in its snapshot and not in the last tick's (the batch
-- predicate), counted through the (ev_txid, ev_id) index, so burnt message ids (rollbacks,
-- repeated idempotency keys, delayed sends) do not count and retried events do.
-- enable_seqscan is off in here: the probes must stay index probes even on a child without
-- statistics (a freshly loaded million-row table), or every ticker pass would scan it.
-- Ticks of one queue are serialised by a transaction advisory lock, so a tick's snapshot is
-- never older than its predecessor's.  The ticking transaction's own xid, when it has one, is
-- marked as running in the snapshot (_tick_snapshot), so events it sent itself are never in a
-- batch before it commits; without one the snapshot is taken as it is, and the xid its insert
-- draws is past the snapshot's xmax.  Whether a tick is due before a keep-alive is the count of
-- the events it would close (at least ticker_max_count, or one after ticker_max_lag), taken
-- after the snapshot: one read of the event table a tick (two when the ticking transaction has
-- an xid: the look for its own events), where a count of the waiting events before it and of
-- the closed ones after it took two (each EXECUTE is planned afresh: 0.3 ms).
-- tick_head gets the tick with quiet_seq, the sequence's value read before the snapshot, when no
-- send of the queue is in flight between that read and the snapshot: a send holds the queue's
-- shared advisory lock from before it draws its id until it ends (pumps and replays too), so a
-- try of that lock in exclusive mode, taken and let go at once, tells that every id up to
-- quiet_seq is of a transaction that ended before the snapshot (in this tick, or aborted); else
-- quiet_seq is NULL and ticker() probes the queue each pass until its next tick.  Events of the
-- ticking transaction itself (not committed yet) make it NULL too.  The same rule spares a
-- keep-alive of an idle queue the count of the events it closes: the last tick quiet at the
-- sequence's value, and that value unmoved once the new snapshot is taken, leave no event that
-- one could close (every event's id is drawn under that lock, pumps and replays included).
-- Plans: the reads and the insert of the tick and event tables are EXECUTEd on the queue's own
-- tables (pglogq.tick_<queue id>, pglogq.event_<queue id>), so each reads and locks that queue's
-- partitions only (a cached plan over the partitioned tables covers, and locks, every queue's
-- partitions: cost and locks grew with the number of queues), and never names the shared
-- parents, whose partition lists (every queue's table) the first statement of a session naming
-- them builds (about 9 ms each at 1,000 queues); every other statement keeps its cached plan (they were all planned afresh on every
-- call, 1-2 ms a tick, which at 1,000 idle queues was most of the ticker's cost).  A keep-alive
-- of an idle queue (its tick_head quiet at the sequence's value, the value unmoved) reads none
-- of the queue's partitions: the last tick's id, time, xmax and event total are in tick_head;
-- and with the transactions running at it (tick_xip, migration 0049) a tick under load reads
-- the event table only, not the tick table.  A keep-alive of an idle queue leaves tick_xip NULL
-- (a list as long as the transactions running, in every idle queue's row each idle period; the
-- next tick of events reads the last tick from the tick table, once).
CREATE OR REPLACE FUNCTION pglogq._tick(queue_id integer, force boolean)
RETURNS bigint LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
DECLARE
    q pglogq.queue;
    h pglogq.tick_head;
    last pglogq.tick;
    snap pg_snapshot;
    cur_seq bigint;
    mine xid8;
    want bigint;
    closed bigint;
    xip_arr xid8[];
    quiet bigint;
    idle boolean;
    own boolean;
    last_xmax xid8;
    last_xip xid8[];  -- the transactions running at the last tick
    early boolean;
    at timestamptz;
    first_tick bigint;
    first_time timestamptz;
    -- the queue's last tick, read from its own partitions (see Plans in the header)
    last_tick constant text := 'SELECT * FROM pglogq.%I t WHERE t.queue_id = $1 ORDER BY t.tick_id DESC LIMIT 1';
BEGIN
    IF force THEN
        PERFORM pg_advisory_xact_lock(hashtext('pglogq.tick'), _tick.queue_id);
    ELSIF NOT pg_try_advisory_xact_lock(hashtext('pglogq.tick'), _tick.queue_id) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = _tick.queue_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- the queue's tables are named below, not reached through the shared parents: a drop_queue
    -- of the queue must not commit from here on (it holds the name's lock exclusive while it
    -- waits, then drops them).  Not forced, it is tried, not waited for: a pass of the ticker
    -- never waits behind a drop (which waits for the queue's open transactions); force_tick
    -- holds it already (_queue).  Held: the row is read again, a drop may have committed since
    IF force THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(q.queue_name));
    ELSIF NOT pg_try_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(q.queue_name)) THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM pglogq.queue x WHERE x.queue_id = _tick.queue_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    cur_seq := coalesce(pg_sequence_last_value(q.event_seq), 0);
    SELECT * INTO h FROM pglogq.tick_head th WHERE th.queue_id = q.queue_id;
    -- idle: the last tick was quiet at this sequence value (every id up to it is of a transaction
    -- that ended before that tick, see the header) and no id was drawn since, by anyone: no event
    -- waits, none of this transaction's own either
    idle := coalesce(h.quiet_seq = cur_seq AND h.tick_event_total IS NOT NULL AND h.tick_xmax IS NOT NULL, false);
    IF idle OR (h.tick_xip IS NOT NULL AND h.tick_xmax IS NOT NULL AND h.tick_event_total IS NOT NULL) THEN
        -- the last tick as tick_head holds it (migration 0049: its xip since then)
        last.tick_id := h.tick_id;
        last.tick_time := h.tick_time;
        last.tick_event_total := h.tick_event_total;
        last_xmax := h.tick_xmax;
        last_xip := h.tick_xip;
    ELSE
        EXECUTE format(last_tick, 'tick_' || q.queue_id) INTO last USING q.queue_id;
        last_xmax := pg_snapshot_xmax(last.tick_snapshot);
        last_xip := ARRAY(SELECT pg_snapshot_xip(last.tick_snapshot));
    END IF;
    -- not forced and no keep-alive due: a tick only when committed events wait (at least
    -- ticker_max_count of them, or one once ticker_max_lag has passed), which the count of the
    -- events this tick would close says below, after the snapshot
    early := NOT force AND clock_timestamp() - last.tick_time < q.ticker_idle_period;
    IF early AND idle THEN
        RETURN NULL;  -- nothing can wait (above), and no keep-alive is due
    END IF;
    want := CASE WHEN NOT early THEN 0 WHEN clock_timestamp() - last.tick_time >= q.ticker_max_lag THEN 1
                 ELSE greatest(q.ticker_max_count, 1) END;
    -- no send of the queue in flight now (see the header): the try and the unlock in a block of
    -- their own, so that an error or a cancel between them never leaves the lock held (it would
    -- stop every send of the queue until this session ends).  Idle: every id up to cur_seq was
    -- of a transaction that had ended at the last tick already, so quiet stays cur_seq
    quiet := cur_seq;
    -- this transaction's xid, if it has one: none is drawn from here to the snapshot
    mine := pg_current_xact_id_if_assigned();
    IF NOT idle THEN
        IF mine IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM pglogq.%I e WHERE e.ev_queue = $1 AND e.ev_txid = $2)',
                           'event_' || q.queue_id)
               INTO own USING q.queue_id, mine;
            IF own THEN
                quiet := NULL;
            END IF;
        END IF;
        IF quiet IS NOT NULL THEN
            BEGIN
                IF pg_try_advisory_lock(hashtext('pglogq.queue'), hashtext(q.queue_name)) THEN
                    PERFORM pg_advisory_unlock(hashtext('pglogq.queue'), hashtext(q.queue_name));
                ELSE
                    quiet := NULL;
                END IF;
            EXCEPTION WHEN query_canceled OR others THEN
                PERFORM pg_advisory_unlock(hashtext('pglogq.queue'), hashtext(q.queue_name));
                RAISE;
            END;
        END IF;
    END IF;
    -- this transaction marked running when it has an xid (its own events are not committed yet);
    -- without one, the snapshot as it is: the xid the tick's insert draws is past its xmax, and
    -- a poll that writes no tick draws none (a producer's open transaction, ids drawn and not
    -- committed, keeps the queue due poll after poll)
    snap := CASE WHEN mine IS NULL THEN pg_current_snapshot() ELSE pglogq._tick_snapshot() END;
    IF pg_snapshot_xmax(snap) < last_xmax THEN
        RAISE EXCEPTION 'transaction ids went backwards on queue "%" (last tick xmax %, now %)',
            q.queue_name, last_xmax, pg_snapshot_xmax(snap)
            USING ERRCODE = 'PQ015',
                  HINT = 'this database looks restored into another cluster; ticking would mis-batch events. '
                         'Recreate the queues before ticking.';
    END IF;
    -- the events this tick closes: visible in snap, not in the last tick's snapshot.  None when
    -- idle and no id was drawn up to now, after snap was taken (a keep-alive of an idle queue:
    -- the event table is not read, nor planned for)
    IF idle AND coalesce(pg_sequence_last_value(q.event_seq), 0) = cur_seq THEN
        closed := 0;
    ELSE
        IF idle AND last_xip IS NULL THEN
            -- an id was drawn meanwhile: this tick may close its event (read the last tick now)
            EXECUTE format(last_tick, 'tick_' || q.queue_id) INTO last USING q.queue_id;
            last_xip := ARRAY(SELECT pg_snapshot_xip(last.tick_snapshot));
        END IF;
        xip_arr := ARRAY(SELECT x FROM unnest(last_xip) x WHERE pg_visible_in_snapshot(x, snap));
        EXECUTE format('SELECT (SELECT count(*) FROM pglogq.%1$I e'
                       '         WHERE e.ev_queue = $1 AND e.ev_txid >= $2 AND e.ev_txid < $3'
                       '           AND pg_visible_in_snapshot(e.ev_txid, $4))'
                       '     + (SELECT count(*) FROM pglogq.%1$I e'
                       '         WHERE cardinality($5) > 0 AND e.ev_queue = $1 AND e.ev_txid = ANY ($5))',
                       'event_' || q.queue_id)
           INTO closed USING q.queue_id, last_xmax, pg_snapshot_xmax(snap), snap, xip_arr;
    END IF;
    IF closed < want THEN
        RETURN NULL;
    END IF;
    at := clock_timestamp();
    EXECUTE format('INSERT INTO pglogq.%I (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq, tick_event_total)'
                   ' VALUES ($1, $2, $3, $4, $5, $6)', 'tick_' || q.queue_id)
      USING q.queue_id, last.tick_id + 1, at, snap, cur_seq, last.tick_event_total + closed;
    -- event_tick, event_time: this tick when it closes events; else the head's, or when the head
    -- has none (a row of before the columns), the first stored tick with the last tick's total:
    -- the one that closed the last events, or a later one when rotation removed it (later is
    -- safe: a listing then reads the queue's ticks more often, never misses an event)
    IF closed = 0 AND (h.event_tick IS NULL OR h.event_time IS NULL) THEN
        EXECUTE format('SELECT t.tick_id, t.tick_time FROM pglogq.%I t'
                       ' WHERE t.queue_id = $1 AND t.tick_event_total = $2 ORDER BY t.tick_id LIMIT 1',
                       'tick_' || q.queue_id)
           INTO first_tick, first_time USING q.queue_id, last.tick_event_total;
    END IF;
    -- prev_event_tick, prev_event_total, prev_event_time: when this tick closes events, the head's
    -- event tick, the total before this tick (every tick from that one up to this one has it; a
    -- head event tick later than the real one, see above, keeps that true) and the head's event
    -- time (that tick's); unknown while the head has none
    INSERT INTO pglogq.tick_head AS th (queue_id, tick_id, tick_time, quiet_seq, tick_xmax, event_tick, event_time,
                                        tick_event_total, tick_xip)
    VALUES (q.queue_id, last.tick_id + 1, at, quiet, pg_snapshot_xmax(snap),
            CASE WHEN closed > 0 THEN last.tick_id + 1 END, CASE WHEN closed > 0 THEN at END,
            last.tick_event_total + closed, CASE WHEN NOT idle THEN ARRAY(SELECT pg_snapshot_xip(snap)) END)
        ON CONFLICT ON CONSTRAINT tick_head_pkey DO UPDATE
       SET tick_id = excluded.tick_id, tick_time = excluded.tick_time, quiet_seq = excluded.quiet_seq,
           tick_xmax = excluded.tick_xmax, tick_event_total = excluded.tick_event_total, tick_xip = excluded.tick_xip,
           (prev_event_tick, prev_event_total, prev_event_time) = (
               CASE WHEN excluded.event_tick IS NULL THEN th.prev_event_tick WHEN th.event_tick IS NOT NULL
                    THEN th.event_tick END,
               CASE WHEN excluded.event_tick IS NULL THEN th.prev_event_total WHEN th.event_tick IS NOT NULL
                    THEN last.tick_event_total END,
               CASE WHEN excluded.event_tick IS NULL THEN th.prev_event_time WHEN th.event_tick IS NOT NULL
                    THEN th.event_time END),
           (event_tick, event_time) = (
               CASE WHEN excluded.event_tick IS NOT NULL THEN excluded.event_tick
                    WHEN th.event_tick IS NOT NULL AND th.event_time IS NOT NULL THEN th.event_tick
                    ELSE coalesce(th.event_tick, first_tick, excluded.tick_id) END,
               CASE WHEN excluded.event_tick IS NOT NULL THEN excluded.event_time
                    WHEN th.event_tick IS NOT NULL AND th.event_time IS NOT NULL THEN th.event_time
                    ELSE coalesce(th.event_time, first_time, excluded.tick_time) END);
    PERFORM pg_notify('pglogq.' || q.queue_name, (last.tick_id + 1)::text);
    RETURN last.tick_id + 1;
END $$;
