-- pglogq.stop_requests(batch_id, msg_ids): which of these events of a batch's page were asked to
-- stop (request_stop).
-- Parameters: batch_id  from receive; msg_ids  the ids to check (the running ones)
-- Returns:    setof msg_id (none when nothing was asked, or the batch is no longer its holder's).
-- Raises:     PQ008 unknown batch id.
-- Tables:     subscription, stop_request (read).  Reads only: a cheap check a handler may make
--             as often as it reports progress.
CREATE OR REPLACE FUNCTION pglogq.stop_requests(batch_id bigint, msg_ids bigint[])
RETURNS SETOF bigint LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    issued bigint;
BEGIN
    IF batch_id IS NULL OR batch_id < 1 THEN
        RAISE EXCEPTION 'unknown batch %', coalesce(batch_id::text, 'NULL') USING ERRCODE = 'PQ008';
    END IF;
    SELECT CASE WHEN b.is_called THEN b.last_value ELSE b.last_value - 1 END INTO issued FROM pglogq.batch_seq b;
    IF batch_id > issued THEN
        RAISE EXCEPTION 'unknown batch %', batch_id USING ERRCODE = 'PQ008';
    END IF;
    RETURN QUERY
    SELECT r.msg_id FROM pglogq.subscription h
      JOIN pglogq.stop_request r ON r.queue_id = h.queue_id
     WHERE h.batch_id = stop_requests.batch_id AND h.page_end_txid IS NOT NULL
       AND r.msg_id = ANY (msg_ids)
     ORDER BY r.msg_id;
END $$;
