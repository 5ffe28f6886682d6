-- pglogq.ack_receive(batch_id, last_msg_id, last_txid, queue_name, consumer_name, max_messages, worker_name, start_first): acknowledge a page and receive the next one, in one statement.
-- Parameters: batch_id, last_msg_id, last_txid  the page to acknowledge, as for ack;
--             queue_name, consumer_name, max_messages, worker_name, start_first  the page to
--             receive next, as for receive (the same holder: the same consumer and worker)
-- Returns:    setof pglogq.message: the next page, as receive returns it.
-- Raises:     what ack raises (PQ008, PQ009: nothing is received then), then what receive raises.
-- Tables:     those of ack, then those of receive.
-- A worker's loop (receive, handle, ack, receive again) spends one round trip and one commit on
-- each ack and each receive; both in one transaction halve the commits, whose flush is most of
-- a short job's cost (a share consumer's no-op job: two flushes of about 4 ms each on the disk
-- we measure on, against well under a millisecond of work).  All or nothing: an ack that is
-- refused receives nothing, and a receive that fails leaves the page unacknowledged.  An
-- acknowledgement of another holder than the one receiving is refused (PQ009): the next page
-- would otherwise belong to a holder whose page was never acknowledged.
-- A share worker's lease cut from a lane goes the short way of _share_step (the queue's copy),
-- once the queue has its copies: the lease acknowledged and the next one cut in one write of
-- the worker's row, its events read once; everything else, and that case when _share_step
-- cannot serve it, is ack, then receive.
CREATE OR REPLACE FUNCTION pglogq.ack_receive(
    batch_id bigint, last_msg_id bigint, last_txid xid8, queue_name text, consumer_name text,
    max_messages integer DEFAULT 100, worker_name text DEFAULT NULL, start_first integer DEFAULT NULL)
RETURNS SETOF pglogq.message LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
    copy text;
BEGIN
    -- the holder, locked as ack locks it (_holder: PQ008, PQ009 when no row holds the batch)
    h := pglogq._holder(batch_id);
    IF h.consumer_name <> ack_receive.consumer_name
       OR h.worker_name IS DISTINCT FROM ack_receive.worker_name AND h.stream IS NULL
       OR (SELECT x.queue_name FROM pglogq.queue x WHERE x.queue_id = h.queue_id)
          IS DISTINCT FROM ack_receive.queue_name THEN
        RAISE EXCEPTION 'batch % is not held by % "%" of queue "%": acknowledge it on its own',
            ack_receive.batch_id, CASE WHEN ack_receive.worker_name IS NULL THEN 'consumer' ELSE 'worker' END,
            coalesce(ack_receive.worker_name, ack_receive.consumer_name), ack_receive.queue_name
            USING ERRCODE = 'PQ009';
    END IF;
    IF h.lease_stream <= -2 AND h.stream IS NULL THEN
        -- a lease cut from a lane: the queue's copy of _share_step, when it has its copies
        copy := format('pglogq.%I', '_q' || h.queue_id || '_@copies@__share_step');
        IF to_regproc(copy) IS NOT NULL THEN
            RETURN QUERY EXECUTE format('SELECT * FROM %s($1, $2, $3, $4, $5, $6, $7, $8, $9)', copy)
                USING h, batch_id, last_msg_id, last_txid, queue_name, consumer_name, max_messages,
                      worker_name, start_first;
            RETURN;
        END IF;
    END IF;
    PERFORM pglogq.ack(batch_id, last_msg_id, last_txid);
    RETURN QUERY SELECT * FROM pglogq.receive(queue_name, consumer_name, max_messages, worker_name, start_first);
END $$;
