-- pglogq.send_batch_json(queue_name, payloads, ...): send_batch taking one JSON array of payloads.
-- Parameters: queue_name; payloads  a JSON array (each element one event's payload); the other
--             parameters as send_batch
-- Returns:    the message ids, in the order of the array.
-- Raises:     as send_batch; PQ007 when payloads is not a JSON array.
-- Tables:     as send_batch.
-- Clients use this form: one JSON document is far cheaper to encode and ship than a jsonb[].
CREATE OR REPLACE FUNCTION pglogq.send_batch_json(
    queue_name text, payloads jsonb, type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_keys text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF payloads IS NULL OR jsonb_typeof(payloads) <> 'array' THEN
        RAISE EXCEPTION 'payloads must be a JSON array, got %', coalesce(jsonb_typeof(payloads), 'NULL')
            USING ERRCODE = 'PQ007';
    END IF;
    RETURN pglogq.send_batch(queue_name, ARRAY(SELECT jsonb_array_elements(payloads)), type, headers,
                             priority, idempotency_keys, deliver_at, delay);
END $$;
