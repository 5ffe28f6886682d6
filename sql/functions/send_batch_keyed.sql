-- pglogq.send_batch_keyed(queue_name, payloads, keys, ...): append many events, each with a key,
-- in one statement.
-- Parameters: queue_name; payloads  a JSON array (each element one event's payload);
--             keys  text[], one key per payload (1 to 255 bytes each, no NULL), or NULL for
--             events without a key: every event of one key goes to one partition of a
--             partitioned queue (key_slot(key) % partitions, see _event_partition), so each
--             consumer gets them in send order, one at a time (an event without a key is spread
--             by its id); on a queue of one partition the key is stored and changes nothing;
--             the other parameters as send_batch
-- Returns:    the message ids, in the order of the array.
-- Raises:     as send_batch; PQ007 when payloads is not a JSON array; PQ076 keys of another
--             length, one-dimensional only, with a NULL or an empty or longer than 255 bytes key;
--             PQ078 on a sharded queue, a key whose slot another shard owns, or (REPEATABLE READ)
--             a transaction whose snapshot predates a change of the shard map (_cluster_route).
-- Tables:     as send_batch.
-- The one implementation of send_batch_json and send_keyed.  Clients use this JSON form: one JSON
-- document is far cheaper to encode and ship than a jsonb[].  Without idempotency keys and delays
-- the events are inserted straight from the array (no jsonb[] built in between, no second
-- function call); with them, pglogq._send_batch does the work.
CREATE OR REPLACE FUNCTION pglogq.send_batch_keyed(
    queue_name text, payloads jsonb, keys text[], type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_keys text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    slot smallint;
    seq regclass;
    maxbytes integer;
    n integer;
    bad bigint;
    hsize integer;
    done bigint;
    ids bigint[];
    parts integer;
    sharded boolean;
BEGIN
    IF payloads IS NULL OR jsonb_typeof(payloads) <> 'array' THEN
        RAISE EXCEPTION 'payloads must be a JSON array, got %', coalesce(jsonb_typeof(payloads), 'NULL')
            USING ERRCODE = 'PQ007';
    END IF;
    IF idempotency_keys IS NOT NULL OR deliver_at IS NOT NULL OR delay IS NOT NULL THEN
        RETURN pglogq._send_batch(queue_name, ARRAY(SELECT jsonb_array_elements(payloads)), type, headers,
                                  priority, idempotency_keys, deliver_at, delay, keys);
    END IF;
    -- from here as send_batch without keys and delays, in the same order of checks
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(send_batch_keyed.queue_name)),
            pglogq._wake_ticker();
    SELECT q.queue_id, q.cur_table, q.event_seq, q.max_payload_bytes, q.partitions, q.sharded
      INTO qid, slot, seq, maxbytes, parts, sharded
      FROM pglogq.queue q WHERE q.queue_name = send_batch_keyed.queue_name;
    IF NOT FOUND THEN
        PERFORM pglogq._queue(queue_name);
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM pglogq._queue(queue_name);  -- an older snapshot may show a dropped queue: 40001
    END IF;
    n := jsonb_array_length(payloads);
    IF n = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    IF n > 100000 THEN
        RAISE EXCEPTION 'too many events in one batch: % (at most 100000)', n USING ERRCODE = 'PQ019';
    END IF;
    PERFORM pglogq._check_event('{}'::jsonb, type, headers, priority, maxbytes, NULL);
    IF keys IS NOT NULL THEN
        PERFORM pglogq._check_keys(keys, n);
        IF sharded THEN
            PERFORM pglogq._cluster_route(keys);  -- a key of another shard: PQ078
        END IF;
    END IF;
    hsize := coalesce(pg_column_size(headers), 0);
    -- ids taken first, in the order of the array (the delivery order within the batch); no
    -- RETURNING to collect and sort them back.  One function scan yields 1..n in order and
    -- ARRAY() keeps the order of its rows, so no ORDER BY (its sort of 1,000 ids cost 1% of the
    -- batch on the server)
    ids := ARRAY(SELECT nextval(seq) FROM generate_series(1, n));
    -- one pass over the array: an element over the cap (payload plus the headers every event
    -- carries) is left out, and then the error below undoes the whole statement with the
    -- transaction (or the caller's savepoint)
    -- into the queue's own table, not through the shared parent (see send: why)
    IF keys IS NOT NULL OR parts > 1 THEN
        EXECUTE format('INSERT INTO pglogq.%I (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers,'
                       '                       ev_priority, ev_key, ev_partition)'
                       ' SELECT $1, $2, $3[u.o], $4, u.p, $5, $6, $7[u.o], pglogq._event_partition($8, $7[u.o], $3[u.o])'
                       '   FROM jsonb_array_elements($9) WITH ORDINALITY AS u(p, o)'
                       '  WHERE pg_column_size(u.p) + $10 <= $11', 'event_' || qid)
          USING qid, slot, ids, type, headers, priority, keys, parts, payloads, hsize, maxbytes;
    ELSE
        EXECUTE format('INSERT INTO pglogq.%I (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers, ev_priority)'
                       ' SELECT $1, $2, $3[u.o], $4, u.p, $5, $6'
                       '   FROM jsonb_array_elements($7) WITH ORDINALITY AS u(p, o)'
                       '  WHERE pg_column_size(u.p) + $8 <= $9', 'event_' || qid)
          USING qid, slot, ids, type, headers, priority, payloads, hsize, maxbytes;
    END IF;
    GET DIAGNOSTICS done = ROW_COUNT;
    IF done < n THEN
        SELECT min(o) INTO bad FROM jsonb_array_elements(payloads) WITH ORDINALITY AS u(p, o)
         WHERE pg_column_size(p) + hsize > maxbytes;
        PERFORM pglogq._check_event(payloads -> (bad::integer - 1), type, headers, priority, maxbytes, bad::integer);
    END IF;
    RETURN ids;
END $$;
