-- pglogq._holder(batch_id): lock and return the subscription row holding a batch.
-- Parameters: batch_id  as returned by receive
-- Returns:    the holder's subscription row, locked FOR NO KEY UPDATE.
-- Raises:     PQ008 unknown batch id; PQ009 not the holder's current batch (already
--             acknowledged, or taken over by another worker).
-- Tables:     subscription (lock).
-- A batch id is (sequence value * 2^20 + holder sub_id), so no lookup table is needed.
CREATE OR REPLACE FUNCTION pglogq._holder(batch_id bigint)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
BEGIN
    IF batch_id IS NULL OR batch_id < 1048576 THEN
        RAISE EXCEPTION 'unknown batch %', coalesce(batch_id::text, 'NULL') USING ERRCODE = 'PQ008';
    END IF;
    SELECT * INTO h FROM pglogq.subscription s WHERE s.sub_id = (_holder.batch_id % 1048576)::integer
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown batch %', batch_id USING ERRCODE = 'PQ008';
    END IF;
    IF h.batch_id IS DISTINCT FROM _holder.batch_id THEN
        RAISE EXCEPTION 'batch % is not the current batch of consumer "%"%', batch_id, h.consumer_name,
            CASE WHEN h.worker_name IS NOT NULL THEN format(' worker "%s"', h.worker_name) ELSE '' END
            USING ERRCODE = 'PQ009',
                  HINT = 'it was acknowledged already, or another worker took it over after this one fell silent';
    END IF;
    RETURN h;
END $$;
