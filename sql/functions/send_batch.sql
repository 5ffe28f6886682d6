-- pglogq.send_batch(queue_name, payloads, ...): append many events in one statement.
-- Parameters: queue_name; payloads  jsonb[] (no NULL elements); type, headers, priority  for every event;
--             idempotency_keys  text[] of the same length, or NULL (elements may be NULL)
--             deliver_at / delay  as for send
-- Returns:    the message ids, in the order of payloads.
-- Raises:     as send; the whole batch is refused if one element is invalid.
-- Idempotency keys are claimed in one fixed order (by key), so concurrent batches sharing keys
-- in any order wait for each other and never deadlock; ids follow the order of payloads.  On a
-- partitioned queue the events have no key and are spread by msg_id (send_batch_keyed sends
-- keyed ones).
-- Tables:     event (insert into the current child); with keys or delays, as send.
-- The work is pglogq._send_batch's (shared with the keyed sends).
CREATE OR REPLACE FUNCTION pglogq.send_batch(
    queue_name text, payloads jsonb[], type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_keys text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    RETURN pglogq._send_batch(queue_name, payloads, type, headers, priority, idempotency_keys, deliver_at,
                              delay, NULL);
END $$;
