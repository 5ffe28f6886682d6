-- pglogq._send_batch(queue_name, payloads, ..., keys): append many events in one statement (the
-- one implementation of send_batch and of the keyed sends with idempotency keys or a delay).
-- Parameters: queue_name; payloads  jsonb[] (no NULL elements); type, headers, priority  for every event;
--             idempotency_keys  text[] of the same length, or NULL (elements may be NULL)
--             deliver_at / delay  as for send
--             keys  text[] of the same length, one key per event (see send_batch_keyed), or NULL
-- Returns:    the message ids, in the order of payloads.
-- Raises:     as send; PQ076 keys of another length, with a NULL or an invalid key; PQ078 a key
--             of another shard on a sharded queue (_cluster_route); the whole batch is refused
--             if one element is invalid.
-- Idempotency keys are claimed in one fixed order (by key), so concurrent batches sharing keys
-- in any order wait for each other and never deadlock; ids follow the order of payloads.
-- Tables:     event (insert into the queue's current child); with keys or delays, as send.
-- The events go into the queue's own table (pglogq.event_<queue id>), never through the shared
-- parent, as in send (why: its header).
CREATE OR REPLACE FUNCTION pglogq._send_batch(
    queue_name text, payloads jsonb[], type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_keys text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL, keys text[] DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    slot smallint;
    seq regclass;
    maxbytes integer;
    ids bigint[];
    i integer;
    win interval;
    due timestamptz;
    fresh boolean[];
    got bigint;
    bad integer;
    parts integer;
    sharded boolean;
BEGIN
    -- a drop_queue of this queue runs first or waits for this transaction (see pglogq._queue)
    -- and a sleeping ticker is woken at commit (pglogq._wake_ticker)
    PERFORM pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(_send_batch.queue_name)), pglogq._wake_ticker();
    SELECT q.queue_id, q.cur_table, q.event_seq, q.max_payload_bytes, q.idempotency_window, q.partitions,
           q.sharded
      INTO qid, slot, seq, maxbytes, win, parts, sharded
      FROM pglogq.queue q WHERE q.queue_name = _send_batch.queue_name;
    IF NOT FOUND THEN
        PERFORM pglogq._queue(queue_name);
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM pglogq._queue(queue_name);  -- an older snapshot may show a dropped queue: 40001
    END IF;
    IF payloads IS NULL OR cardinality(payloads) = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- every array below is read by position from 1, and a caller's array may start elsewhere
    -- ('[0:1]={...}'): such an array is renumbered, its order kept (read from subscript 1, the
    -- keys of '[0:1]={a,b}' were NULL and b: a not-null violation, 23502)
    IF array_lower(payloads, 1) <> 1 THEN
        payloads := ARRAY(SELECT u.p FROM unnest(payloads) WITH ORDINALITY AS u(p, o) ORDER BY u.o);
    END IF;
    IF array_lower(idempotency_keys, 1) <> 1 THEN
        idempotency_keys := ARRAY(SELECT u.k FROM unnest(idempotency_keys) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
    END IF;
    IF array_lower(keys, 1) <> 1 THEN
        keys := ARRAY(SELECT u.k FROM unnest(keys) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
    END IF;
    IF cardinality(payloads) > 100000 THEN
        RAISE EXCEPTION 'too many events in one batch: % (at most 100000)', cardinality(payloads)
            USING ERRCODE = 'PQ019';
    END IF;
    PERFORM pglogq._check_event('{}'::jsonb, type, headers, priority, maxbytes, NULL);
    -- the cap covers each payload plus the headers every event carries
    SELECT min(o) INTO bad FROM unnest(payloads) WITH ORDINALITY AS u(p, o)
     WHERE p IS NULL OR pg_column_size(p) + coalesce(pg_column_size(headers), 0) > maxbytes;
    IF bad IS NOT NULL THEN
        PERFORM pglogq._check_event(payloads[bad], type, headers, priority, maxbytes, bad);
    END IF;
    IF keys IS NOT NULL THEN
        PERFORM pglogq._check_keys(keys, cardinality(payloads));
        IF sharded THEN
            PERFORM pglogq._cluster_route(keys);  -- a key of another shard: PQ078
        END IF;
    END IF;
    IF idempotency_keys IS NOT NULL OR deliver_at IS NOT NULL OR delay IS NOT NULL THEN
        IF idempotency_keys IS NOT NULL AND cardinality(idempotency_keys) <> cardinality(payloads) THEN
            RAISE EXCEPTION 'idempotency_keys has % elements, payloads has %',
                cardinality(idempotency_keys), cardinality(payloads) USING ERRCODE = 'PQ019';
        END IF;
        IF deliver_at IS NOT NULL OR delay IS NOT NULL THEN
            due := pglogq._due_time(deliver_at, delay);
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(idempotency_keys) k WHERE k = '' OR octet_length(k) > 255) THEN
            RAISE EXCEPTION 'invalid idempotency key: must be 1 to 255 bytes' USING ERRCODE = 'PQ019';
        END IF;
        -- ids in the order of payloads (the delivery order within the batch)
        ids := ARRAY(SELECT nextval(seq) FROM generate_series(1, cardinality(payloads)) g ORDER BY g);
        fresh := array_fill(true, ARRAY[cardinality(payloads)]);
        -- keys in one fixed order (by key, then position), whatever their order in the call, so
        -- two batches sharing keys in opposite orders wait for each other instead of deadlocking;
        -- a key repeated in the batch takes the id of its first element
        FOR i IN SELECT u.o FROM unnest(idempotency_keys) WITH ORDINALITY AS u(k, o)
                  WHERE u.k IS NOT NULL ORDER BY u.k COLLATE "C", u.o LOOP
            got := NULL;
            INSERT INTO pglogq.idempotency_key AS k (queue_id, idem_key, msg_id)
            VALUES (qid, idempotency_keys[i], ids[i])
            ON CONFLICT (queue_id, idem_key) DO UPDATE SET msg_id = EXCLUDED.msg_id, created_at = now()
                  WHERE k.created_at < now() - win
            RETURNING k.msg_id INTO got;
            IF got IS NULL THEN
                SELECT k.msg_id INTO got FROM pglogq.idempotency_key k
                 WHERE k.queue_id = qid AND k.idem_key = idempotency_keys[i];
                ids[i] := got;
                fresh[i] := false;
            END IF;
        END LOOP;
        IF due IS NULL THEN
            EXECUTE format('INSERT INTO pglogq.%I (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers,'
                           '                       ev_priority, ev_key, ev_partition)'
                           ' SELECT $1, $2, $3[o], $4, $5[o], $6, $7, $8[o], pglogq._event_partition($9, $8[o], $3[o])'
                           '   FROM generate_subscripts($5, 1) AS o WHERE $10[o] ORDER BY o', 'event_' || qid)
              USING qid, slot, ids, type, payloads, headers, priority, keys, parts, fresh;
        ELSE
            INSERT INTO pglogq.delayed (queue_id, msg_id, deliver_at, ev_type, ev_payload, ev_headers, ev_priority,
                                        ev_key)
            SELECT qid, ids[o], due, type, payloads[o], headers, priority, keys[o]
              FROM generate_subscripts(payloads, 1) AS o WHERE fresh[o] ORDER BY o;
        END IF;
        RETURN ids;
    END IF;
    IF keys IS NOT NULL OR parts > 1 THEN
        EXECUTE format('WITH v AS (SELECT p, o, nextval($1) AS id FROM unnest($2) WITH ORDINALITY AS u(p, o)),'
                       ' ins AS (INSERT INTO pglogq.%I (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers,'
                       '                                ev_priority, ev_key, ev_partition)'
                       '         SELECT $3, $4, v.id, $5, v.p, $6, $7, $8[v.o], pglogq._event_partition($9, $8[v.o], v.id)'
                       '           FROM v)'
                       ' SELECT array_agg(v.id ORDER BY v.o) FROM v', 'event_' || qid)
           INTO ids USING seq, payloads, qid, slot, type, headers, priority, keys, parts;
        RETURN ids;
    END IF;
    EXECUTE format('WITH v AS (SELECT p, o, nextval($1) AS id FROM unnest($2) WITH ORDINALITY AS u(p, o)),'
                   ' ins AS (INSERT INTO pglogq.%I (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers, ev_priority)'
                   '         SELECT $3, $4, v.id, $5, v.p, $6, $7 FROM v)'
                   ' SELECT array_agg(v.id ORDER BY v.o) FROM v', 'event_' || qid)
       INTO ids USING seq, payloads, qid, slot, type, headers, priority;
    RETURN ids;
END $$;
