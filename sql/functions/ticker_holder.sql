-- pglogq.ticker_holder(): which session is this database's active ticker right now.
-- Parameters: none
-- Returns:    one row (pid, application_name, client, since) for the session holding the
--             ticker's advisory lock (the daemon's and pglogq.start_ticker's: key
--             0x70676C6F67710001), client its address ('local' for a Unix socket) and since
--             when its connection exists; no row when no ticker is active (standby tickers
--             hold no lock and are not seen here).
-- Raises:     nothing.
-- Tables:     none (reads pg_locks and pg_stat_activity).
CREATE OR REPLACE FUNCTION pglogq.ticker_holder()
RETURNS TABLE (pid integer, application_name text, client text, since timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT a.pid, a.application_name, coalesce(host(a.client_addr), 'local'), a.backend_start
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.classid = (x'70676C6F67710001'::bigint >> 32)::oid
       AND l.objid = (x'70676C6F67710001'::bigint & x'FFFFFFFF'::bigint)::oid
       AND l.objsubid = 1
     LIMIT 1;
$$;
