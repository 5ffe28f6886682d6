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
-- sequence, and calls _tick (which counts the events of its event table a tick closes) only for
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
-- And a call reads the rows and id sequences of at most 1,000 queues (fewer when the session
-- setting pglogq.ticker_look says so), the next call going on after them: reading a sequence's
-- last value locks it to the end of the transaction, so a pass in one call held a lock a queue
-- (2,385 at 5,400 queues; the lock table, shared by the server, ran out before 10,000).  A database of
-- 10,000 queues is looked at in a round of 10 calls, in id order, which the daemon makes one
-- after another as for a call cut short by per_call; the round's last call counts as a whole
-- pass (its shortcut state starts from the snapshot of the round's first call, kept with the
-- soonest keep-alive of the round in the session setting pglogq.ticker_round).
-- Shortcut: a whole pass (not cut short) keeps in the session setting pglogq.ticker_seen its
-- starting snapshot, the soonest time a keep-alive falls due, and the xid of its own transaction
-- when the session says, with the setting pglogq.ticker_autocommit = 'on', that it runs each
-- call in a transaction of its own with nothing else in it (the daemon does: its keep-alives
-- are then that transaction's only writes) and nothing was written before the call.  When the
-- next pass starts, no transaction but that own one ended in between if none of the old
-- snapshot's running transactions is visible in the new one and every xid drawn since is
-- running or the own one: then no event was committed, the sequences are not read, and only
-- keep-alives fall due (and queues with a ticker_max_lag, whose thresholds depend on the time);
-- before the soonest keep-alive is due, the pass reads no table at all.  A keep-alive waits up
-- to a tenth of the queue's ticker_idle_period (at most 1 s) past its due time, so that those
-- falling due close together are written in one pass: at 1,000 idle queues a pass with a
-- keep-alive due was every pass, 5 a second, each reading every queue's row (and, after the
-- daemon's own commit, every queue's sequence: 2 ms).  With writes anywhere else on the
-- server, every pass reads the sequences (one lock each: about 3 µs a queue).  A session that
-- sets pglogq.ticker_autocommit and then sends in the ticking transaction after the call has
-- those events ticked by the first pass after another transaction ends, or at the next
-- keep-alive: later, never lost.
CREATE OR REPLACE FUNCTION pglogq.ticker(queue_name text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    n integer := 0;
    per_call constant integer := 20;  -- queues looked at per call (documented in the header)
    -- queues whose rows and sequences a call reads (the header; a session may set fewer)
    look integer := greatest(least(coalesce(substring(current_setting('pglogq.ticker_look', true)
                                                      FROM '^\d{1,6}$')::integer, 1000), 1000), 1);
    window_ids integer[];
    partial boolean;
    last_window boolean := false;
    rnd text[];
    next_q integer := coalesce(nullif(current_setting('pglogq.ticker_next', true), '')::integer, 0);
    last_q integer;
    cur pg_snapshot := pg_current_snapshot();
    -- the last whole pass of this session: its snapshot, its own xid, when time makes a queue due
    seen text[] := string_to_array(nullif(current_setting('pglogq.ticker_seen', true), ''), '/');
    prev pg_snapshot;
    own xid8;
    still boolean := false;
    -- a session that runs each call in a transaction of its own (see the header), nothing
    -- written in this one before the call
    alone boolean := coalesce(current_setting('pglogq.ticker_autocommit', true) = 'on', false)
                     AND pg_current_xact_id_if_assigned() IS NULL;
    due integer[];
    soonest timestamptz;
    lagged boolean;
    ticked bigint;
    closing boolean;
    next_at timestamptz;
    flow integer := 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the ticker must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    IF queue_name IS NOT NULL THEN
        qid := (pglogq._queue(queue_name)).queue_id;
    ELSIF cardinality(seen) = 3 THEN
        prev := seen[1]::pg_snapshot;
        own := nullif(seen[2], '')::xid8;
        -- nothing ended since the last whole pass but its own transaction (see the header): none
        -- of its running transactions is visible now, and every xid drawn since is running or its own
        still := NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(prev) x WHERE pg_visible_in_snapshot(x, cur))
             AND pg_snapshot_xmax(cur)::text::bigint - pg_snapshot_xmax(prev)::text::bigint
                 = (SELECT count(*) FROM pg_snapshot_xip(cur) x WHERE x >= pg_snapshot_xmax(prev))
                   + CASE WHEN own >= pg_snapshot_xmax(prev) AND own < pg_snapshot_xmax(cur) THEN 1 ELSE 0 END;
        IF still AND seen[3] <> '' AND clock_timestamp() < to_timestamp(seen[3]::float8) THEN
            -- no event committed and no keep-alive due: no queue to read
            PERFORM set_config('pglogq.ticker_flow', '0', false);
            RETURN 0;
        END IF;
    END IF;
    -- the event table before any queue's rows, as drop_queue takes them: no deadlock with it
    LOCK TABLE ONLY pglogq.event IN ACCESS SHARE MODE;
    -- the queues this call looks at (see the header): all of them, round robin from where the last
    -- call stopped, when they are at most `look`; else the next `look` in id order from there, a
    -- round of calls (a sequence read locks the sequence to the end of the transaction)
    window_ids := ARRAY(SELECT x.queue_id FROM pglogq.queue x
                         WHERE (ticker.queue_name IS NULL AND NOT x.paused) OR x.queue_id = qid
                         ORDER BY x.queue_id < next_q, x.queue_id LIMIT look + 1);
    partial := cardinality(window_ids) > look;
    IF partial THEN
        window_ids := ARRAY(SELECT x.queue_id FROM pglogq.queue x WHERE NOT x.paused AND x.queue_id >= next_q
                             ORDER BY x.queue_id LIMIT look + 1);
        last_window := cardinality(window_ids) <= look;
        window_ids := window_ids[1:look];
        -- the round so far: the snapshot its first call started from ('' when not known: no
        -- shortcut after it), the soonest keep-alive, whether a queue with a ticker_max_lag was due
        rnd := string_to_array(nullif(current_setting('pglogq.ticker_round', true), ''), '/');
        IF next_q = 0 OR cardinality(rnd) IS DISTINCT FROM 3 THEN
            rnd := ARRAY[CASE WHEN next_q = 0 THEN cur::text ELSE '' END, '', 'f'];
        END IF;
    END IF;
    -- of those, the queues with something to do, in that order; of the others, the soonest time a
    -- keep-alive falls due, up to its grace later
    SELECT coalesce(array_agg(s.queue_id ORDER BY s.i) FILTER (WHERE s.due), '{}'),
           min(s.next_at) FILTER (WHERE NOT s.due),
           coalesce(bool_or(s.lagged) FILTER (WHERE s.due), false)
      INTO due, soonest, lagged
      FROM (SELECT x.queue_id, w.i, x.ticker_max_lag > interval '0' AS lagged,
                   h.tick_time + x.ticker_idle_period + least(interval '1 second', x.ticker_idle_period / 10) AS next_at,
                   ticker.queue_name IS NOT NULL OR h.queue_id IS NULL
                   OR clock_timestamp() - h.tick_time >= x.ticker_idle_period
                   OR ((NOT still OR x.ticker_max_lag > interval '0')
                       AND (h.quiet_seq IS NULL
                            OR coalesce(pg_sequence_last_value(x.event_seq), 0) > h.quiet_seq)) AS due
              FROM unnest(window_ids) WITH ORDINALITY w(queue_id, i)
              JOIN pglogq.queue x ON x.queue_id = w.queue_id
              LEFT JOIN pglogq.tick_head h ON h.queue_id = x.queue_id) s;
    FOREACH qid IN ARRAY due[1:per_call] LOOP
        last_q := qid;
        ticked := pglogq._tick(qid, false);
        -- a tick that closed events is the queue's event_tick (_tick): not a keep-alive; and
        -- the queue's next keep-alive, ticked or not (another ticker held it, nothing committed)
        SELECT h.event_tick = ticked,
               h.tick_time + x.ticker_idle_period + least(interval '1 second', x.ticker_idle_period / 10)
          INTO closing, next_at
          FROM pglogq.tick_head h JOIN pglogq.queue x ON x.queue_id = h.queue_id
         WHERE h.queue_id = qid;
        IF ticked IS NOT NULL THEN
            n := n + 1;
            IF closing THEN
                flow := flow + 1;
            END IF;
        END IF;
        soonest := least(soonest, next_at);
    END LOOP;
    PERFORM set_config('pglogq.ticker_flow', flow::text, false);
    IF ticker.queue_name IS NULL THEN
        IF partial THEN
            rnd[2] := coalesce(least(nullif(rnd[2], '')::float8, extract(epoch FROM soonest)::float8)::text, '');
            rnd[3] := CASE WHEN rnd[3] = 't' OR lagged THEN 't' ELSE 'f' END;
        END IF;
        IF cardinality(due) <= per_call AND (NOT partial OR last_window) THEN
            -- a whole pass, or the last call of a round: the shortcut's state, from the start of
            -- the pass (a queue with a ticker_max_lag probed here without a tick may fall due by
            -- time alone: it is looked at again in the next pass)
            PERFORM set_config('pglogq.ticker_seen',
                CASE WHEN NOT partial
                     THEN cur::text || '/'
                          || coalesce(CASE WHEN alone THEN pg_current_xact_id_if_assigned()::text END, '')
                          || '/' || coalesce(CASE WHEN NOT lagged THEN extract(epoch FROM soonest)::text END, '')
                     WHEN rnd[1] <> ''
                     THEN rnd[1] || '/'
                          || coalesce(CASE WHEN alone THEN pg_current_xact_id_if_assigned()::text END, '')
                          || '/' || CASE WHEN rnd[3] = 'f' THEN rnd[2] ELSE '' END
                     ELSE '' END, false);
            PERFORM set_config('pglogq.ticker_next', '0', false);
            PERFORM set_config('pglogq.ticker_round', '', false);
        ELSE
            -- cut short by per_call, or a round of calls goes on: not every queue was looked at,
            -- no shortcut after this call
            PERFORM set_config('pglogq.ticker_seen', '', false);
            PERFORM set_config('pglogq.ticker_next',
                               (CASE WHEN cardinality(due) > per_call THEN last_q
                                     ELSE window_ids[cardinality(window_ids)] END + 1)::text, false);
            PERFORM set_config('pglogq.ticker_round', CASE WHEN partial THEN array_to_string(rnd, '/') ELSE '' END,
                               false);
        END IF;
    END IF;
    RETURN n;
END $$;
