-- pglogq._stream_takeover(h, worker): a stream row picked for worker, taken over if a silent worker held it.
-- Parameters: h  the stream's row, locked by the caller (_stream_pick); worker  the taker's name
-- Returns:    h, with a new batch id when its page was out to another (silent or released)
--             worker; h unchanged otherwise.
-- Raises:     nothing (a NOTICE names the worker whose page was taken over).
-- Tables:     progress (the stream's rows deleted on a takeover), batch_seq.
-- The one owner of a partition stream's takeover: both of _stream_pick's ways to a stream (by
-- its marks, or the fallback over every stream) end here.  The new batch id makes the old
-- holder's late ack and nacks stale (PQ009); its progress reports go with its page.
CREATE OR REPLACE FUNCTION pglogq._stream_takeover(h pglogq.subscription, worker text)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF h.page_end_txid IS NOT NULL AND h.lease_worker IS DISTINCT FROM worker THEN
        RAISE NOTICE 'worker "%" took over partition % of consumer "%" from silent worker "%" (last heartbeat %)',
            worker, h.stream, h.consumer_name, h.lease_worker, h.heartbeat_at;
        DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id;
        h.batch_id := nextval('pglogq.batch_seq');
    END IF;
    RETURN h;
END $$;
