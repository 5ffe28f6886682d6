-- pglogq.ticker(queue_name): tick every non-paused queue (or one) whose thresholds say so.
-- Parameters: queue_name  one queue, or NULL for all
-- Returns:    the number of ticks written.  The session setting pglogq.ticker_flow then holds how
--             many of them closed events (the others are keep-alives): a poller keeps its
--             busy pace only while events flow (the daemon: a keep-alive falls due every few
--             milliseconds at 1,000 idle queues, and each one kept it polling every 5 ms).
-- Raises:     PQ001 unknown queue; PQ014 not in READ COMMITTED; PQ015 txids went backwards.
-- Tables:     tick (insert), tick_head (read, written with each tick, read after it), event (probe).  Sends NOTIFY "pglogq.<queue>" with the tick id.
-- Thresholds (set_queue_config): a tick is written when committed events wait and either
-- ticker_max_count are waiting or ticker_max_lag has passed since the last tick, or when
-- ticker_idle_period has passed (keep-alive).  A queue another ticker is ticking is skipped.
-- A pass over all queues reads one row of tick_head per queue and the last value of its id
-- sequence, and calls _tick (which reads the queue's ticks and probes its event table) only for
-- a queue with something to do: ids drawn since its last tick (sends, or a pump or replay into
-- it; ids of rolled-back sends too, until the next tick), a tick written while a send was in
-- flight (quiet_seq NULL), or its keep-alive due.  An idle pass touches no partition: at 1,000
-- idle queues it took the locks of every queue's partitions (and ran out of the lock table).
-- Bounded: a call looks at most at 20 such queues, so that one transaction never holds the
-- partition locks of more than 20 queues (about 40 locks each; the lock table is shared by the
-- whole server, 64 per connection by default); the rest wait for the next call, which goes on
-- from the queue after the last one looked at (the session setting pglogq.ticker_next: round
-- robin, none waits behind queues that are probed without a tick).  The daemon calls again at
-- once while ticks are written: 1,000 queues whose keep-alive falls due together are 50 calls.
-- Shortcut: a whole pass (not cut short) keeps its starting snapshot in the session setting
-- pglogq.ticker_seen.  When the next pass starts with the same snapshot, no transaction that
-- had an xid ended in between (a commit or abort moves the xmax or leaves the running list),
-- so no event was committed: the sequences are not read at all, and only keep-alives fall
-- due (and queues with a ticker_max_lag, whose thresholds depend on the time).  On a quiet
-- server a pass then reads the queue and tick_head rows only; with writes anywhere on the
-- server, every pass reads the sequences (one lock each: about 3 µs a queue).
CREATE OR REPLACE FUNCTION pglogq.ticker(queue_name text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    n integer := 0;
    per_call constant integer := 20;  -- queues looked at per call (documented in the header)
    next_q integer := coalesce(nullif(current_setting('pglogq.ticker_next', true), '')::integer, 0);
    last_q integer;
    seen text := pg_current_snapshot()::text;
    still boolean;
    looked integer := 0;
    ticked bigint;
    flow integer := 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the ticker must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    IF queue_name IS NOT NULL THEN
        qid := (pglogq._queue(queue_name)).queue_id;
    END IF;
    -- the event table before any queue's rows, as drop_queue takes them: no deadlock with it
    LOCK TABLE ONLY pglogq.event IN ACCESS SHARE MODE;
    -- nothing ended since this session's last whole pass (see the header)
    -- (a session's first pass has no setting: current_setting gives NULL, which must read false,
    -- or the filter below would pass over every queue whose keep-alive is not due)
    still := ticker.queue_name IS NULL AND coalesce(current_setting('pglogq.ticker_seen', true) = seen, false);
    FOR qid IN SELECT x.queue_id FROM pglogq.queue x
                  LEFT JOIN pglogq.tick_head h ON h.queue_id = x.queue_id
                WHERE ((ticker.queue_name IS NULL AND NOT x.paused) OR x.queue_id = qid)
                  AND (ticker.queue_name IS NOT NULL OR h.queue_id IS NULL
                       OR clock_timestamp() - h.tick_time >= x.ticker_idle_period
                       OR ((NOT still OR x.ticker_max_lag > interval '0')
                           AND (h.quiet_seq IS NULL
                                OR coalesce(pg_sequence_last_value(x.event_seq), 0) > h.quiet_seq)))
                -- round robin from where the last call stopped, at most per_call (see the header)
                ORDER BY x.queue_id < next_q, x.queue_id
                LIMIT CASE WHEN ticker.queue_name IS NULL THEN per_call END LOOP
        looked := looked + 1;
        last_q := qid;
        ticked := pglogq._tick(qid, false);
        IF ticked IS NOT NULL THEN
            n := n + 1;
            -- a tick that closed events is the queue's event_tick (_tick): not a keep-alive
            IF EXISTS (SELECT 1 FROM pglogq.tick_head h WHERE h.queue_id = qid AND h.event_tick = ticked) THEN
                flow := flow + 1;
            END IF;
        END IF;
    END LOOP;
    PERFORM set_config('pglogq.ticker_flow', flow::text, false);
    IF ticker.queue_name IS NULL THEN
        -- a pass cut short by per_call has not looked at every queue: no shortcut after it
        PERFORM set_config('pglogq.ticker_seen', CASE WHEN looked < per_call THEN seen ELSE '' END, false);
        PERFORM set_config('pglogq.ticker_next', CASE WHEN looked < per_call THEN '0' ELSE (last_q + 1)::text END, false);
    END IF;
    RETURN n;
END $$;
