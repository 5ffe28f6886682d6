-- pglogq._wake_ticker(): wake a ticker that sleeps until events come (see pglogq.ticker_sleep).
-- Parameters: none.
-- Returns:    nothing.  Sends NOTIFY "pglogq:ticker" at commit when a ticker sleeps now.
-- Tables:     none.
-- Called by everything that draws event ids (send, the batch sends, the pump, replay), by what
-- gives the daemon's maintenance work (a nack's retry, a new schedule: it pauses while its
-- ticker sleeps) and by what changes what the ticker has to do (resume, a new queue, a queue's
-- thresholds), in the caller's transaction.  The shared lock it tries is held until that transaction ends, so a ticker can
-- fall asleep only when no such transaction is in flight; one that begins while the ticker
-- sleeps fails the try and notifies.  Either way no event waits for a sleeping ticker.
-- LANGUAGE sql with one expression and no SET clause: inlined into the caller's statement, it
-- costs a lock try (and, while a ticker sleeps, a NOTIFY), not a function call.
CREATE OR REPLACE FUNCTION pglogq._wake_ticker()
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN NOT pg_catalog.pg_try_advisory_xact_lock_shared(pg_catalog.hashtext('pglogq.ticker'), 0)
                THEN pg_catalog.pg_notify('pglogq:ticker', '') END
$$;
