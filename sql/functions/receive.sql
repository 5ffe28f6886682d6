-- pglogq.receive(queue_name, consumer_name, max_messages, worker_name, start_first): the consumer's
-- current batch, one page at a time.
-- Parameters: queue_name; consumer_name; max_messages  page size, 1..100000 (default 100);
--             worker_name  set it to run as one of several cooperating workers of the consumer
--             (each worker gets different batches; a silent worker's batch is taken over; on a
--             partitioned queue each worker reads one partition's stream at a time, see
--             _stream_pick); required for a share consumer, whose workers each get a lease of
--             at most max_messages events of the consumer's batch (the next events no worker
--             was given: any idle worker takes the next events), acknowledged like a batch
--             (see _share_lease);
--             start_first  NULL (default): every event of the page counts as started by a
--             handler when it is returned (cancel refuses them from then on); 0..100000: the
--             caller marks the starts itself with mark_started(), and the first start_first
--             events of the page count as started now (cancel still cancels the others, and
--             a crash counts a failed attempt only for the started ones)
-- Returns:    setof pglogq.message, in delivery order: priority desc, then transaction order
--             (on a partitioned queue: the events of one partition, in transaction order, the
--             priority aside, so that the events of one key come in the order they were sent).
--             Empty only when nothing is left to receive up to the last tick: batches with
--             nothing for this consumer (cancelled events, other consumers' retries) are
--             closed and passed in the same call.  retry_count counts nacks and crashes.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer (also when it is unsubscribed, or its
--             queue dropped, while the call waits); PQ004 invalid worker name;
--             PQ017 a tick of the cursor or of the open batch is gone; PQ019 max_messages out of range;
--             PQ060 start_first out of range; PQ079 on a sharded queue, the consumer is gated
--             by a move of slots to this shard (see _cluster_gate_check); PQ090 a share consumer
--             called without a worker name.
-- Tables:     subscription (lock), sub_state (one update; a batch found empty is closed through
--             _close_batch; a lease cut here: its lane's row locked through _share_lane and its
--             frontier moved through _share_advance), progress (rows of such a batch deleted; a page handed out again
--             under a new id: its rows move to it), batch_seq, tick (read), event (read),
--             cancelled (read), attempt, dead_letter (through _crashed_page, after a crash).
-- Until ack(batch_id), calling receive again returns the same page (a crash before ack
-- redelivers); when it ends elsewhere this time (another max_messages, a crash's halving,
-- cancels), under a new batch id, and the earlier hand-out's ack, nack and reports are refused
-- (PQ009).  ack acknowledges exactly the returned page; the next receive returns the rest
-- of the batch; the consumer passes the batch when all of it is acknowledged.  Two concurrent
-- calls for the same consumer (or worker) serialise on its row and get the same page.
-- Leases: a share worker's lease is cut by _share_lease (through _take_batch), or, for the usual
-- case of a consumer with lanes (a lane's batch being handed out, no window, no urgent lane, no
-- silent worker's lease to take over), here: the lease is this call's page, its end where the
-- read stops, so its events are read once (_share_lease reads them to find the end, and the
-- page read reads them again).  Measured on PostgreSQL 15, a worker's fused ack and receive of
-- one event: 914-1,113 us of server time before, 682-827 us after (three runs each, alternated).
-- Crashes: when the page was handed out before with started handlers (start_first not NULL)
-- and not acknowledged (the worker died, or its batch was taken over), each started event
-- counts a failed attempt (_crashed_page) and the page is handed out again halved, down to one
-- event, until the run of events under suspicion is passed: the event that kills its worker
-- every time stands alone, and goes to the dead-letter queue after max_retries + 1 attempts.
-- Copies: the call is answered by the queue's own copy of this function (and of the helpers it
-- calls that read the tick and event tables), whose statements name the queue's tables, so that
-- its generic plans lock only those, whatever the number of queues (see _queue_functions: why,
-- and the measurements); this function finds it (one dynamic call) or makes it.
-- Plans: generic (plan_cache_mode): a custom plan of the page query over the partitioned event
-- table was planned again on every call (about a third of a receive of 100 events, measured
-- with callgrind); enable_sort and jit off as in _batch_page, whose transaction-order query the
-- usual page runs here.  Cancel markers: looked at only when the batch's transaction range holds
-- one, then one primary-key probe per row read (OFFSET 0 keeps the test a per-row subplan: as
-- an anti-join the generic plan hashed every marker of the queue for every page, 19 ms a page
-- at 100,000 markers), so a page costs the same whatever the number of markers.  enable_seqscan
-- is off in here (and in _batch_page): a generic plan is kept for the session, and one made
-- while the markers filled a page or two (analysed so) probed them by a scan of the table, which
-- it kept after a mass cancel until the next ANALYZE: every marker read for every event of the
-- batch (4,000 markers: 8,400,000 rows read for a page of 100).  The txid index cannot serve
-- that probe either (its predicate, migration 0042): only the primary key can.
CREATE OR REPLACE FUNCTION pglogq.receive(
    queue_name text, consumer_name text, max_messages integer DEFAULT 100, worker_name text DEFAULT NULL,
    start_first integer DEFAULT NULL)
RETURNS SETOF pglogq.message LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_sort = off
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    q pglogq.queue;
    c pglogq.subscription;
    h pglogq.subscription;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    page pglogq.message[];
    n integer;
    last_row pglogq.message;
    stored boolean;
    lim integer;
    k integer;
    h2 pglogq.subscription;
    first_row pglogq.message;
    new_id integer;
    again boolean := false;  -- the page out is handed out again
    was pglogq.subscription;
    again_id bigint;
    tried smallint[];
    ordinary pglogq.subscription;  -- the holder of ordinary events while the urgent lane is tried
    pm pglogq.message;  -- a row of the streamed page
    streamed boolean := false;
    hi xid8;  -- the streamed page in transaction order: the bounds and flags of _batch_page's
    from_txid xid8;  -- query of that case
    from_id bigint;
    to_txid xid8;  -- and the end: a lease's last event, else the cur tick's xmax
    to_id bigint;
    owner integer;
    any_cancel boolean;
    copy text;
    copy_of integer;  -- the queue whose copy answers
    lean boolean;  -- the short way to a share worker's lease is open (see the loop)
    cut integer;  -- the lane a lease was cut from on that way, until the read fixes its end
    ln record;  -- that lane's batch
BEGIN
    -- queue copy: from here
    -- the queue's own copy of this function (_queue_functions), whose generic plans read and
    -- lock its tables only; the name's shared lock first, as below (a drop_queue racing this
    -- call, which drops the copy, is waited for); no such queue: the body below says so
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(receive.queue_name));
    SELECT x.queue_id INTO copy_of FROM pglogq.queue x WHERE x.queue_name = receive.queue_name;
    IF FOUND THEN
        copy := '_q' || copy_of || '_@copies@_receive';
        IF to_regproc('pglogq.' || copy) IS NULL THEN
            -- the first receive since an install changed the functions (or since the copies
            -- were dropped): the copies made now, once (racing receives wait for the first).
            -- An older snapshot (not READ COMMITTED) may show a queue dropped since, and its
            -- copies: _queue says so first (40001), as the body below would
            IF current_setting('transaction_isolation') <> 'read committed' THEN
                PERFORM pglogq._queue(queue_name);
            END IF;
            PERFORM pg_advisory_xact_lock(hashtext('pglogq.queue_functions'), copy_of);
            IF to_regproc('pglogq.' || copy) IS NULL THEN
                PERFORM pglogq._queue_functions(copy_of);
            END IF;
        END IF;
        RETURN QUERY EXECUTE format('SELECT * FROM pglogq.%I($1, $2, $3, $4, $5)', copy)
            USING queue_name, consumer_name, max_messages, worker_name, start_first;
        RETURN;
    END IF;
    -- queue copy: to here
    IF start_first IS NOT NULL AND (start_first < 0 OR start_first > 100000) THEN
        RAISE EXCEPTION 'invalid start_first %: use 0..100000, or NULL', start_first
            USING ERRCODE = 'PQ060';
    END IF;
    IF max_messages IS NULL OR max_messages < 1 OR max_messages > 100000 THEN
        RAISE EXCEPTION 'invalid max_messages %: use 1..100000', coalesce(max_messages::text, 'NULL')
            USING ERRCODE = 'PQ019';
    END IF;
    -- the queue row, as _queue reads it (its shared lock first: a drop_queue racing this call
    -- is waited for, then the row is read afresh); _queue itself when the row is not found (its
    -- error and hint) or outside READ COMMITTED (its lock of the row)
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(receive.queue_name));
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_name = receive.queue_name;
    IF NOT FOUND OR current_setting('transaction_isolation') <> 'read committed' THEN
        q := pglogq._queue(queue_name);
    END IF;
    IF worker_name IS NULL AND q.partitions <= 1 AND NOT q.sharded THEN
        -- the usual holder, the consumer itself: its row read once, locked, after _consumer's
        -- shared lock (an unsubscribe racing this call is waited for); not found, the general
        -- path below says why (PQ002 with its hint)
        PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.consumer.' || q.queue_id),
                                             hashtext(receive.consumer_name));
        SELECT * INTO h FROM pglogq.subscription s
         WHERE s.queue_id = q.queue_id AND s.consumer_name = receive.consumer_name AND s.parent_id IS NULL
           FOR NO KEY UPDATE;
        IF FOUND AND NOT h.share THEN
            c := h;
        END IF;
    END IF;
    IF c.sub_id IS NULL THEN
        c := pglogq._consumer(q.queue_id, queue_name, consumer_name);
        IF c.share AND worker_name IS NULL THEN
            RAISE EXCEPTION 'consumer "%" on queue "%" is a share consumer: receive needs a worker name',
                c.consumer_name, q.queue_name
                USING ERRCODE = 'PQ090',
                      HINT = 'pass worker_name (one per process or handler slot): each worker gets its own lease';
        END IF;
        IF q.sharded THEN
            PERFORM pglogq._cluster_gate_check(q, c.sub_id);  -- gated by a move of slots: PQ079
        END IF;
        IF worker_name IS NOT NULL AND worker_name !~ '^[A-Za-z0-9_.:@-]{1,63}$' THEN
            RAISE EXCEPTION 'invalid worker name "%": 1 to 63 ASCII letters, digits or _.:@-', left(worker_name, 80)
                USING ERRCODE = 'PQ004';
        END IF;
        IF q.partitions > 1 THEN
            -- a partitioned queue: the worker reads one partition's stream (no worker row is made)
            PERFORM 1 FROM pglogq.subscription s WHERE s.sub_id = c.sub_id FOR KEY SHARE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'unknown consumer "%" on queue "%"', c.consumer_name, q.queue_name
                    USING ERRCODE = 'PQ002';
            END IF;
            PERFORM pglogq._stream_skip(q, c.sub_id);  -- the partitions with nothing new, at once
            tried := '{}';
            h := pglogq._stream_pick(q, c.sub_id, coalesce(worker_name, ''), tried);
            IF h.sub_id IS NULL THEN
                RETURN;
            END IF;
        ELSIF worker_name IS NULL THEN
            SELECT * INTO h FROM pglogq.subscription s WHERE s.sub_id = c.sub_id FOR NO KEY UPDATE;
            IF NOT FOUND THEN
                -- unsubscribed (or its queue dropped) by a transaction that committed while we waited
                RAISE EXCEPTION 'unknown consumer "%" on queue "%"', c.consumer_name, q.queue_name
                    USING ERRCODE = 'PQ002';
            END IF;
        ELSE
            SELECT * INTO h FROM pglogq.subscription s
             WHERE s.parent_id = c.sub_id AND s.worker_name = receive.worker_name FOR NO KEY UPDATE;
            IF NOT FOUND THEN
                -- a new worker: its consumer must still exist (KEY SHARE does not conflict with the
                -- NO KEY UPDATE locks of receive, seek and retention, only with its removal)
                PERFORM 1 FROM pglogq.subscription s WHERE s.sub_id = c.sub_id FOR KEY SHARE;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'unknown consumer "%" on queue "%"', c.consumer_name, q.queue_name
                        USING ERRCODE = 'PQ002';
                END IF;
                INSERT INTO pglogq.subscriber (queue_id, consumer_name, parent_id, worker_name)
                VALUES (q.queue_id, c.consumer_name, c.sub_id, receive.worker_name)
                ON CONFLICT DO NOTHING
                RETURNING sub_id INTO new_id;
                IF new_id IS NOT NULL THEN
                    INSERT INTO pglogq.sub_state (sub_id, heartbeat_at, last_seen)
                    VALUES (new_id, clock_timestamp(), clock_timestamp());
                END IF;
                SELECT * INTO h FROM pglogq.subscription s
                 WHERE s.parent_id = c.sub_id AND s.worker_name = receive.worker_name FOR NO KEY UPDATE;
            END IF;
        END IF;
    END IF;
    -- a queue with an urgent lane: its stream first (the page this worker holds there, or its
    -- urgent events), unless ordinary events have waited for a page for more than a second
    -- (nested IFs: the tick query is planned only on such a queue)
    IF q.urgent_lane AND NOT c.share THEN
        IF h.stream IS NULL AND h.page_end_txid IS NULL
           AND (h.last_seen IS NULL OR h.last_seen > clock_timestamp() - interval '1 second'
                OR (h.batch_id IS NULL AND coalesce(h.last_tick, c.last_tick)
                        >= (SELECT max(t.tick_id) FROM pglogq.tick t WHERE t.queue_id = q.queue_id))) THEN
            tried := '{}';
            h2 := pglogq._stream_pick(q, c.sub_id, coalesce(worker_name, ''), tried);
            IF h2.sub_id IS NOT NULL THEN
                ordinary := h;
                h := h2;
            END IF;
        END IF;
    END IF;
    -- the holder's row may hold an open batch (from an earlier call); a batch taken below is
    -- written to the row only at the end, with the page
    stored := h.batch_id IS NOT NULL;
    lean := c.share AND h.parent_id IS NOT NULL AND h.stream IS NULL AND NOT q.urgent_lane
            AND c.share_window IS NULL;
    LOOP
        IF h.batch_id IS NULL AND lean THEN
            -- the short way to a share worker's lease (tried once a call): from a lane whose
            -- batch is being handed out, when no silent worker's lease waits to be taken over
            -- (_lease_waits: _take_batch takes it).  The lease's end is where this call's
            -- read stops (its page is the lease, written with its end below), so its events
            -- are read once; _share_lease reads them to find the end, and receive again.
            -- Anything else (a lane to give a new batch, none free, a window, an urgent lane,
            -- a takeover) goes the general way, through _take_batch
            lean := false;
            IF NOT pglogq._lease_waits(c.sub_id, h.sub_id, q.dead_interval) THEN
                cut := pglogq._share_lane(c.sub_id, h.sub_id % 8, '{}');
                IF cut IS NOT NULL THEN
                    SELECT s.stream, st.batch_id, st.batch_prev_tick, st.batch_cur_tick, st.batch_big,
                           st.page_prio, st.page_txid, st.page_id INTO ln
                      FROM pglogq.subscriber s JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
                     WHERE st.sub_id = cut;
                    IF ln.batch_id IS NULL THEN
                        cut := NULL;  -- the lane needs its next batch: the general way takes it
                    ELSE
                        -- a lease, as _share_lease cuts it (its end below, after the read)
                        h.batch_id := nextval('pglogq.batch_seq');
                        h.batch_prev_tick := ln.batch_prev_tick;
                        h.batch_cur_tick := ln.batch_cur_tick;
                        h.batch_big := ln.batch_big;
                        h.batch_started_at := clock_timestamp();
                        h.page_prio := ln.page_prio;
                        h.page_txid := ln.page_txid;
                        h.page_id := ln.page_id;
                        h.page_end_prio := NULL;
                        h.page_end_txid := NULL;
                        h.page_end_id := NULL;
                        h.page_more := NULL;
                        h.page_marks := NULL;
                        h.started_prio := NULL;
                        h.started_txid := NULL;
                        h.started_id := NULL;
                        h.suspect_prio := NULL;
                        h.suspect_txid := NULL;
                        h.suspect_id := NULL;
                        h.lease_end_prio := NULL;
                        h.lease_end_txid := NULL;
                        h.lease_end_id := NULL;
                        h.lease_stream := ln.stream;
                        h.lease_seq := coalesce(c.share_handed, 0);
                    END IF;
                END IF;
            END IF;
        END IF;
        IF h.batch_id IS NULL THEN
            h := pglogq._take_batch(q, c.sub_id, h, max_messages);
            IF h.batch_id IS NULL THEN
                -- persist a cursor moved past empty batches; note the visit at most once a second
                IF h.last_seen IS NULL OR h.last_seen < clock_timestamp() - interval '1 second'
                   OR (h.parent_id IS NULL AND h.last_tick IS DISTINCT FROM c.last_tick)
                   OR h.stream IS NOT NULL THEN
                    UPDATE pglogq.sub_state s
                       SET last_seen = clock_timestamp(), heartbeat_at = clock_timestamp(),
                           last_tick = h.last_tick
                     WHERE s.sub_id = h.sub_id;
                END IF;
                IF h.stream IS NOT NULL THEN
                    -- nothing in this partition (or lane) up to the last tick: the next free one,
                    -- else the ordinary events
                    tried := tried || h.stream;
                    h := pglogq._stream_pick(q, c.sub_id, coalesce(worker_name, ''), tried);
                    IF h.sub_id IS NULL AND ordinary.sub_id IS NOT NULL THEN
                        h := ordinary;
                        ordinary := NULL;
                    END IF;
                    IF h.sub_id IS NULL THEN
                        RETURN;
                    END IF;
                    stored := h.batch_id IS NOT NULL;
                    CONTINUE;
                END IF;
                RETURN;
            END IF;
        END IF;
        again := stored AND h.page_end_txid IS NOT NULL;  -- the page out, handed out again
        IF again THEN
            was := h;  -- its end, before _crashed_page clears it
        END IF;
        SELECT p.tick_snapshot, t.tick_snapshot INTO prev_snap, cur_snap
          FROM pglogq.tick p, pglogq.tick t
         WHERE p.queue_id = q.queue_id AND p.tick_id = h.batch_prev_tick
           AND t.queue_id = q.queue_id AND t.tick_id = h.batch_cur_tick;  -- none: both NULL
        IF prev_snap IS NULL OR cur_snap IS NULL THEN
            -- never take "its ticks are gone" for "it is empty": that would skip its events
            RAISE EXCEPTION 'tick % or % of the open batch of consumer "%" is gone',
                h.batch_prev_tick, h.batch_cur_tick, c.consumer_name
                USING ERRCODE = 'PQ017', HINT = 'seek the consumer (force => true) to a tick that still exists';
        END IF;
        IF h.page_marks AND h.started_txid IS NOT NULL THEN
            -- handed out before, handlers started, no ack: a crash (or a takeover) - count it
            h := pglogq._crashed_page(q, h, prev_snap, cur_snap);
        END IF;
        IF h.suspect_txid IS NULL AND NOT again
           AND NOT EXISTS (SELECT 1 FROM pglogq.attempt a WHERE a.sub_id = h.sub_id) THEN
            -- the usual page (no crash under suspicion, no crash counts to add): streamed out as
            -- it is read, keeping only the keys the row below stores (one copy of each event,
            -- where an array of the page took three).  Per row: a count and RETURN NEXT; the
            -- last row is kept once (at max_messages, or the loop variable after the loop).
            n := 0;
            hi := pg_snapshot_xmax(cur_snap);
            IF h.stream IS NULL AND coalesce(h.lease_stream, -2) <= -2
               AND (h.batch_big OR NOT EXISTS (SELECT 1 FROM pglogq.event e
                                               WHERE e.ev_queue = q.queue_id AND e.ev_priority <> 100
                                                 AND e.ev_txid >= pg_snapshot_xmin(prev_snap) AND e.ev_txid < hi)) THEN
                -- a batch read in transaction order (a big one, or one where every event has the
                -- default priority): _batch_page's query of that case, read here rather than
                -- through it, which saves a copy of each row (its result set, read back); the
                -- same bounds, filters and order (see _batch_page), enable_sort off likewise
                -- markers of this batch's transactions only (the txid index of migration 0025):
                -- the markers of other batches, however many, cost this page nothing
                any_cancel := EXISTS (SELECT 1 FROM pglogq.cancelled x
                                       WHERE x.queue_id = q.queue_id
                                         AND x.ev_txid >= pg_snapshot_xmin(prev_snap) AND x.ev_txid < hi);
                from_txid := coalesce(h.page_txid, pg_snapshot_xmin(prev_snap));
                from_id := CASE WHEN h.page_txid IS NULL THEN -1 ELSE h.page_id END;
                to_txid := coalesce(h.lease_end_txid, hi);
                to_id := coalesce(h.lease_end_id, 9223372036854775807);
                owner := coalesce(h.parent_id, h.sub_id);
                FOR pm IN SELECT h.batch_id, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry,
                                 e.ev_time, e.ev_priority, e.ev_txid
                            FROM pglogq.event e
                           WHERE e.ev_queue = q.queue_id
                             AND (e.ev_txid, e.ev_id) > (from_txid, from_id) AND e.ev_txid < hi
                             AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
                             AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
                             AND (e.ev_owner IS NULL OR e.ev_owner = owner)
                             -- a lease's end as an upper bound of the index range (an "end IS
                             -- NULL OR key <= end" test is none: the look for the row after a
                             -- lease's last read the rest of the batch, on every receive)
                             AND (e.ev_txid, e.ev_id) <= (to_txid, to_id)
                             AND (NOT q.urgent_lane OR e.ev_priority <= 100)
                             -- a lease cut from a share consumer's lane: that lane's events
                             AND (h.lease_stream IS NULL OR e.ev_id % 8 = -2 - h.lease_stream)
                             AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled x
                                                                WHERE x.queue_id = q.queue_id AND x.msg_id = e.ev_id
                                                                OFFSET 0))
                           ORDER BY e.ev_txid, e.ev_id
                           LIMIT max_messages + 1 LOOP
                    n := n + 1;
                    EXIT WHEN n > max_messages;  -- one more than the page: the batch goes on
                    IF n = start_first THEN
                        first_row := pm;
                    END IF;
                    IF n = max_messages THEN
                        last_row := pm;
                    END IF;
                    RETURN NEXT pm;
                END LOOP;
            ELSE
                FOR pm IN SELECT h.batch_id, m.msg_id, m.type, m.payload, m.headers, m.retry_count,
                                 m.created_at, m.priority, m.txid
                            FROM pglogq._batch_page(q.queue_id, coalesce(h.parent_id, h.sub_id),
                                                    prev_snap, cur_snap, h.batch_big,
                                                    h.page_prio, h.page_txid, h.page_id,
                                                    max_messages + 1, coalesce(h.stream, h.lease_stream),
                                                    q.urgent_lane AND coalesce(h.stream, h.lease_stream, -2) <= -2,
                                                    h.batch_started_at) m
                           WHERE h.lease_end_txid IS NULL OR pglogq._page_position(h, m.priority, m.txid, m.msg_id) < 2 LOOP
                    n := n + 1;
                    EXIT WHEN n > max_messages;  -- one more than the page: the batch goes on
                    IF n = start_first THEN
                        first_row := pm;
                    END IF;
                    IF n = max_messages THEN
                        last_row := pm;
                    END IF;
                    RETURN NEXT pm;
                END LOOP;
            END IF;
            IF n BETWEEN 1 AND max_messages THEN
                last_row := pm;  -- the loop ran out: its variable holds the last row
            END IF;
            streamed := true;
        ELSE
            streamed := false;
            page := ARRAY(SELECT m FROM pglogq._batch_page(q.queue_id, coalesce(h.parent_id, h.sub_id),
                                                            prev_snap, cur_snap, h.batch_big,
                                                            h.page_prio, h.page_txid, h.page_id,
                                                            max_messages + 1, coalesce(h.stream, h.lease_stream),
                                                            q.urgent_lane AND coalesce(h.stream, h.lease_stream, -2) <= -2,
                                                            h.batch_started_at) m
                           WHERE h.lease_end_txid IS NULL OR pglogq._page_position(h, m.priority, m.txid, m.msg_id) < 2);
            n := cardinality(page);
        END IF;
        EXIT WHEN n > 0;
        IF cut IS NOT NULL THEN
            -- the lane's batch has nothing left for us (cancelled, others' retries): closed, and
            -- the general way goes on from its next batch
            PERFORM pglogq._close_batch(cut);
            cut := NULL;
        END IF;
        -- nothing (left) in this batch for us (all of it cancelled, or others' retries): close
        -- it and look at the next one, until a batch has something or no tick is left -- never
        -- return empty while a ticked event waits, never leave an empty batch open.  Each turn
        -- passes at least one tick, so the work is bounded by the ticks behind the cursor.
        IF stored THEN
            PERFORM pglogq._close_batch(h.sub_id, true);
            stored := false;
        ELSE
            DELETE FROM pglogq.attempt a WHERE a.sub_id = h.sub_id;  -- a batch taken over, found empty
        END IF;
        h.batch_id := NULL;
        h.batch_prev_tick := NULL;
        h.batch_cur_tick := NULL;
        h.batch_big := NULL;
        h.batch_started_at := NULL;
        h.page_prio := NULL;
        h.page_txid := NULL;
        h.page_id := NULL;
        h.page_end_prio := NULL;
        h.page_end_txid := NULL;
        h.page_end_id := NULL;
        h.page_more := NULL;
        h.page_marks := NULL;
        h.started_prio := NULL;
        h.started_txid := NULL;
        h.started_id := NULL;
        h.suspect_prio := NULL;
        h.suspect_txid := NULL;
        h.suspect_id := NULL;
        h.lease_end_prio := NULL;
        h.lease_end_txid := NULL;
        h.lease_end_id := NULL;
        h.lease_stream := NULL;
        h.lease_seq := NULL;
    END LOOP;
    lim := max_messages;
    IF streamed THEN
        -- the rows are returned already; the keys were kept on the way (first_row: NULL when
        -- start_first is 0, else the start_first-th row or, on a shorter page, the last)
        IF start_first IS NULL THEN
            first_row := last_row;
        ELSIF start_first > 0 AND n <= start_first THEN
            first_row := last_row;
        END IF;
    ELSIF h.suspect_txid IS NOT NULL THEN
        -- after a crash: halve the run under suspicion until the event that crashes stands alone
        h2 := h;
        h2.page_txid := NULL;
        h2.started_prio := h.suspect_prio;
        h2.started_txid := h.suspect_txid;
        h2.started_id := h.suspect_id;
        SELECT count(*) INTO k FROM unnest(page) m
         WHERE pglogq._page_position(h2, m.priority, m.txid, m.msg_id, true) = 0;
        IF k = 0 THEN
            h.suspect_prio := NULL;
            h.suspect_txid := NULL;
            h.suspect_id := NULL;
        ELSE
            lim := least(max_messages, greatest(1, k / 2));
        END IF;
    END IF;
    IF NOT streamed THEN
        IF n > lim THEN
            last_row := page[lim];
        ELSE
            last_row := page[n];
        END IF;
        IF again AND (last_row.priority, last_row.txid, last_row.msg_id)
                     IS DISTINCT FROM (was.page_end_prio, was.page_end_txid, was.page_end_id) THEN
            -- the page handed out again ends elsewhere (another size, a crash's halving, events
            -- cancelled meanwhile): a new batch id, so that the earlier hand-out can no longer
            -- acknowledge, nack or report on it.  Kept, the earlier one and the page after this
            -- one's ack could share an end, and its ack would be taken for that page and
            -- acknowledge what was acknowledged already (its handler's effects committed
            -- twice).  The same page again keeps its id: the first ack wins.  Its reported
            -- progress goes along.
            again_id := nextval('pglogq.batch_seq');
            UPDATE pglogq.progress p SET batch_id = again_id WHERE p.sub_id = h.sub_id AND p.batch_id = h.batch_id;
            h.batch_id := again_id;
        END IF;
        IF start_first IS NULL THEN
            first_row := last_row;
        ELSE
            first_row := page[least(start_first, n, lim)];  -- NULL when start_first is 0
        END IF;
    END IF;
    IF cut IS NOT NULL THEN
        -- a lease cut on the short way: it ends with this page (the lane's frontier follows)
        h.lease_end_prio := last_row.priority;
        h.lease_end_txid := last_row.txid;
        h.lease_end_id := last_row.msg_id;
        PERFORM pglogq._share_advance(cut, c.sub_id, least(n, lim), n > lim,
                                      last_row.priority, last_row.txid, last_row.msg_id);
    END IF;
    h.page_marks := start_first IS NOT NULL;
    UPDATE pglogq.sub_state s
       SET last_tick = h.last_tick, batch_id = h.batch_id, batch_prev_tick = h.batch_prev_tick,
           batch_cur_tick = h.batch_cur_tick, batch_big = h.batch_big,
           batch_started_at = h.batch_started_at,
           page_prio = h.page_prio, page_txid = h.page_txid, page_id = h.page_id,
           page_end_prio = last_row.priority, page_end_txid = last_row.txid, page_end_id = last_row.msg_id,
           page_more = (n > lim AND cut IS NULL), page_marks = h.page_marks,
           started_prio = first_row.priority, started_txid = first_row.txid, started_id = first_row.msg_id,
           suspect_prio = h.suspect_prio, suspect_txid = h.suspect_txid, suspect_id = h.suspect_id,
           released_at = NULL,
           heartbeat_at = clock_timestamp(), last_seen = clock_timestamp(),
           lease_worker = CASE WHEN h.stream IS NOT NULL THEN coalesce(worker_name, '') END,
           -- a page handed out (again): a nack of its earlier delivery that was not acknowledged
           -- counted its failure and is void now (the page is a new delivery)
           hold_txid = NULL, hold_id = NULL, hold_until = NULL,
           lease_end_prio = h.lease_end_prio, lease_end_txid = h.lease_end_txid, lease_end_id = h.lease_end_id,
           lease_stream = h.lease_stream, lease_seq = h.lease_seq
     WHERE s.sub_id = h.sub_id;
    IF streamed THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM pglogq.attempt a WHERE a.sub_id = h.sub_id) THEN
        -- crashed attempts count like nacks
        RETURN QUERY
        SELECT h.batch_id, m.msg_id, m.type, m.payload, m.headers, m.retry_count + coalesce(a.crashes, 0),
               m.created_at, m.priority, m.txid
          FROM unnest(page[1:lim]) WITH ORDINALITY m
          LEFT JOIN pglogq.attempt a ON a.sub_id = h.sub_id AND a.msg_id = m.msg_id
         ORDER BY m.ordinality;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT h.batch_id, m.msg_id, m.type, m.payload, m.headers, m.retry_count, m.created_at, m.priority, m.txid
      FROM unnest(page[1:lim]) m;
END $$;
