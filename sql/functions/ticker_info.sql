-- pglogq.ticker_info(): when a ticker last ran in this database.
-- Parameters: none
-- Returns:    one row: last_run_at  the last time a ticker recorded its restore check
--             (ticker_check(true): the daemon does at start and about once a minute; NULL when
--             no ticker ever ran).
-- Raises:     nothing.
-- Tables:     ticker_state (read).
CREATE OR REPLACE FUNCTION pglogq.ticker_info()
RETURNS TABLE (last_run_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT t.last_run_at FROM pglogq.ticker_state t;
$$;
