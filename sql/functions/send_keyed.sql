-- pglogq.send_keyed(queue_name, payload, key, ...): append one event with a key.
-- Parameters: queue_name; payload  any JSON value (not SQL NULL); key  1 to 255 bytes: every
--             event of one key goes to one partition of a partitioned queue, so each consumer
--             gets them in send order, one at a time (see send_batch_keyed); the other
--             parameters as send
-- Returns:    the message id.
-- Raises:     as send; PQ076 invalid key (NULL, empty or longer than 255 bytes); PQ078 on a
--             sharded queue, a key whose slot another shard owns (see send_batch_keyed).
-- Tables:     as send_batch_keyed, which does the work (one event).
CREATE OR REPLACE FUNCTION pglogq.send_keyed(
    queue_name text, payload jsonb, key text, type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_key text DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF payload IS NULL THEN
        RETURN pglogq.send(queue_name, payload);  -- refuses it as send does
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'invalid key: NULL (send without a key with send)' USING ERRCODE = 'PQ076';
    END IF;
    RETURN (pglogq.send_batch_keyed(queue_name, jsonb_build_array(payload), ARRAY[key], type, headers, priority,
                                    CASE WHEN idempotency_key IS NULL THEN NULL ELSE ARRAY[idempotency_key] END,
                                    deliver_at, delay))[1];
END $$;
