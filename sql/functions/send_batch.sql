-- pglogq.send_batch(queue_name, payloads, ...): append many events in one statement.
-- Parameters: queue_name; payloads  jsonb[] (no NULL elements); type, headers, priority  for every event;
--             idempotency_keys  text[] of the same length, or NULL (elements may be NULL)
--             deliver_at / delay  as for send
-- Returns:    the message ids, in the order of payloads.
-- Raises:     as send; the whole batch is refused if one element is invalid.
-- Tables:     event (insert into the current child); with keys or delays, as send.
CREATE OR REPLACE FUNCTION pglogq.send_batch(
    queue_name text, payloads jsonb[], type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_keys text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    slot smallint;
    seq regclass;
    maxbytes integer;
    ids bigint[];
    i integer;
    bad integer;
BEGIN
    SELECT q.queue_id, q.cur_table, q.event_seq, q.max_payload_bytes
      INTO qid, slot, seq, maxbytes
      FROM pglogq.queue q WHERE q.queue_name = send_batch.queue_name;
    IF NOT FOUND THEN
        PERFORM pglogq._queue(queue_name);
    END IF;
    IF payloads IS NULL OR cardinality(payloads) = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    IF cardinality(payloads) > 100000 THEN
        RAISE EXCEPTION 'too many events in one batch: % (at most 100000)', cardinality(payloads)
            USING ERRCODE = 'PQ019';
    END IF;
    PERFORM pglogq._check_event('{}'::jsonb, type, headers, priority, maxbytes, NULL);
    SELECT min(o) INTO bad FROM unnest(payloads) WITH ORDINALITY AS u(p, o)
     WHERE p IS NULL OR pg_column_size(p) > maxbytes;
    IF bad IS NOT NULL THEN
        PERFORM pglogq._check_event(payloads[bad], type, headers, priority, maxbytes, bad);
    END IF;
    IF idempotency_keys IS NOT NULL OR deliver_at IS NOT NULL OR delay IS NOT NULL THEN
        IF idempotency_keys IS NOT NULL AND cardinality(idempotency_keys) <> cardinality(payloads) THEN
            RAISE EXCEPTION 'idempotency_keys has % elements, payloads has %',
                cardinality(idempotency_keys), cardinality(payloads) USING ERRCODE = 'PQ019';
        END IF;
        ids := ARRAY[]::bigint[];
        FOR i IN 1 .. cardinality(payloads) LOOP
            ids := ids || pglogq.send(queue_name, payloads[i], type, headers, priority,
                                      idempotency_keys[i], deliver_at, delay);
        END LOOP;
        RETURN ids;
    END IF;
    WITH v AS (
        SELECT p, o, nextval(seq) AS id FROM unnest(payloads) WITH ORDINALITY AS u(p, o)
    ), ins AS (
        INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers, ev_priority)
        SELECT qid, slot, v.id, type, v.p, headers, priority FROM v
    )
    SELECT array_agg(v.id ORDER BY v.o) INTO ids FROM v;
    RETURN ids;
END $$;
