-- pglogq.send_batch_json(queue_name, payloads, ...): send_batch taking one JSON array of payloads.
-- Parameters: queue_name; payloads  a JSON array (each element one event's payload); the other
--             parameters as send_batch
-- Returns:    the message ids, in the order of the array.
-- Raises:     as send_batch; PQ007 when payloads is not a JSON array.
-- Tables:     as send_batch.
-- send_batch_keyed without keys (which does the work).
CREATE OR REPLACE FUNCTION pglogq.send_batch_json(
    queue_name text, payloads jsonb, type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_keys text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    RETURN pglogq.send_batch_keyed(queue_name, payloads, NULL, type, headers, priority, idempotency_keys,
                                   deliver_at, delay);
END $$;
