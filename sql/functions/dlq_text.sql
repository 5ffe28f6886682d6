-- pglogq.dlq_text(for_dead_id): the whole payload and headers of one dead letter as pretty JSON
-- text (what dlq_search cuts to a preview).
-- Parameters: for_dead_id  a dead_id from dlq_search or dlq_inspect
-- Returns:    one row (payload_text, headers_text): jsonb_pretty of each; headers_text is NULL
--             when the event has no headers.
-- Raises:     PQ012 unknown dead letter (never existed, purged, or already replayed).
-- Tables:     dead_letter (read).
CREATE OR REPLACE FUNCTION pglogq.dlq_text(for_dead_id bigint)
RETURNS TABLE (payload_text text, headers_text text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    wanted bigint := for_dead_id;
BEGIN
    RETURN QUERY
    SELECT jsonb_pretty(d.ev_payload), jsonb_pretty(d.ev_headers)
      FROM pglogq.dead_letter d
     WHERE d.dead_id = wanted;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown dead letter %', coalesce(wanted::text, 'NULL')
            USING ERRCODE = 'PQ012', HINT = 'it may have been replayed or purged already';
    END IF;
END $$;
