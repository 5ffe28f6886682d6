-- pglogq._worker_name(h): the worker name a holder's page was received under (the one owner of
-- "which worker holds this page").
-- Parameters: h  a holder's subscription row: a consumer, a cooperating worker, or the stream of
--             one partition (or of the urgent lane)
-- Returns:    the worker_name given to receive; NULL when the consumer received it itself (no
--             worker name).  A cooperating worker's row carries its name (worker_name); a
--             stream is leased, page by page, to whichever worker asked (lease_worker, '' for
--             the consumer itself), so its name is the lease's.
-- Raises:     nothing.
-- Tables:     none.
-- report_progress (the default label of a progress row), lookup and jobs read it, so a page of a
-- partitioned queue names its worker exactly as one of a queue of one partition does.
CREATE OR REPLACE FUNCTION pglogq._worker_name(h pglogq.subscription)
RETURNS text LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    RETURN coalesce(h.worker_name, CASE WHEN h.stream IS NOT NULL THEN nullif(h.lease_worker, '') END);
END $$;
