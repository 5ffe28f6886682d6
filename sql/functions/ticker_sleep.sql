-- pglogq.ticker_sleep(asleep): let a ticking session sleep until events come, or end its sleep.
-- Parameters: asleep  true: fall asleep if nothing is in flight; false: wake up
-- Returns:    true when the session sleeps now.  asleep => true returns false, and changes
--             nothing, while a transaction that draws event ids is in flight, and in a session
--             that does not LISTEN to "pglogq:ticker" yet: that call LISTENs (in its own
--             transaction: ask again in the next one).
-- Raises:     nothing.
-- Tables:     none.  A session-level advisory lock (pglogq._wake_ticker's, exclusive).
-- The daemon sleeps when its idle passes find nothing to do, instead of polling five times a
-- second: every transaction that draws event ids (or resumes a queue, creates one, changes its
-- thresholds) tries the shared side of this lock and, while a ticker holds it, sends NOTIFY
-- "pglogq:ticker" at its commit.  Taking the lock succeeds only when no such transaction is in
-- flight, so a pass run after it sees every event committed before, and each one committed
-- after has notified: the sleeping session waits for a notification or its next keep-alive and
-- may tick meanwhile (the lock stays held).  It ends the sleep with asleep => false before it
-- polls at its busy pace again: while the lock is held every send pays a NOTIFY.
CREATE OR REPLACE FUNCTION pglogq.ticker_sleep(asleep boolean)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF NOT coalesce(asleep, false) THEN
        -- every hold of this session (a session lock taken twice is held twice)
        WHILE pg_advisory_unlock(hashtext('pglogq.ticker'), 0) LOOP
        END LOOP;
        RETURN false;
    END IF;
    IF NOT 'pglogq:ticker' = ANY (ARRAY(SELECT pg_listening_channels())) THEN
        -- the LISTEN takes effect at this transaction's commit: sleeping before it could miss a
        -- notification sent in between
        LISTEN "pglogq:ticker";
        RETURN false;
    END IF;
    -- taken twice when asleep already: asleep => false lets go of every hold
    RETURN pg_try_advisory_lock(hashtext('pglogq.ticker'), 0);
END $$;
