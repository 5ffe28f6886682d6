-- pglogq._holder(batch_id, strict): lock and return the subscription row holding a batch.
-- Parameters: batch_id  as returned by receive; strict  raise PQ009 when the id is no longer
--             anybody's current batch (default); false: return a row of NULLs instead
-- Returns:    the holder's subscription row, locked FOR NO KEY UPDATE.
-- Raises:     PQ008 unknown batch id (NULL, below 1, or never issued); PQ009 (strict only) not
--             the current batch of any holder: acknowledged already, closed (seek, retention),
--             or taken over by another worker.
-- Tables:     subscription (lock, through the unique index on batch_id), queue, batch_seq (read).
-- A batch id is a plain number from pglogq.batch_seq (issued by _take_batch, one per batch and
-- holder): nothing is encoded in it.  The holder is the row whose batch_id is that id; an id at
-- most the sequence's last value was issued, so when no row holds it, it is stale, not unknown.
-- Locks: the queue name's advisory lock, shared, before the row: the order drop_queue (and every
-- call naming a queue) takes them in.  The row first deadlocked with a drop_queue(force), which
-- holds the queue's tables while it waits to delete the row (a nack or mark_started then read
-- them; a heartbeat's row lock then any call naming the queue in the same transaction).  A drop
-- committed meanwhile leaves no holder: PQ009.
CREATE OR REPLACE FUNCTION pglogq._holder(batch_id bigint, strict boolean DEFAULT true)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
    issued bigint;
BEGIN
    IF batch_id IS NULL OR batch_id < 1 THEN
        RAISE EXCEPTION 'unknown batch %', coalesce(batch_id::text, 'NULL') USING ERRCODE = 'PQ008';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(x.queue_name))
       FROM pglogq.subscription s JOIN pglogq.queue x ON x.queue_id = s.queue_id
      WHERE s.batch_id = _holder.batch_id;
    SELECT * INTO h FROM pglogq.subscription s WHERE s.batch_id = _holder.batch_id FOR NO KEY UPDATE;
    IF FOUND THEN
        RETURN h;
    END IF;
    SELECT CASE WHEN b.is_called THEN b.last_value ELSE b.last_value - 1 END INTO issued FROM pglogq.batch_seq b;
    IF batch_id > issued THEN
        RAISE EXCEPTION 'unknown batch %', batch_id USING ERRCODE = 'PQ008';
    END IF;
    IF strict THEN
        RAISE EXCEPTION 'batch % is not the current batch of any consumer or worker', batch_id
            USING ERRCODE = 'PQ009',
                  HINT = 'it was acknowledged already, another worker took it over after this one fell silent, '
                         'or a seek (force) or the retention limit ended it';
    END IF;
    RETURN h;
END $$;
