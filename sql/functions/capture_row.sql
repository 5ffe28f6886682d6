-- pglogq.capture_row(): the trigger function of change capture (made by pglogq.capture_table).
-- Parameters: none of its own (a trigger function).  Its trigger arguments, written by
--             capture_table, never by hand: queue_name, old_values ('none' | 'changed' | 'full'),
--             key columns, include columns or '', exclude columns or '' (arrays as text), only_if
--             (JSON text or '', listed by captured_tables; the trigger's WHEN clause applies it).
-- Returns:    NULL (an AFTER trigger).  Appends one event through pglogq.send (or send_keyed,
--             below), in the writer's transaction: type 'insert' | 'update' | 'delete' |
--             'truncate'; payload {"op", "table", "key": {pk column: value}, "new": row, "old":
--             row or changed columns, "old_key" (only when an UPDATE changed the key)}; headers {"key": the key as text
--             (one column: its value; several: a JSON array of the values), "table"}.  An UPDATE
--             that changes none of the captured columns nor the key appends nothing.
--             On a queue of several partitions the event is sent with a key (send_keyed): the
--             key header's text, so that a row's events go to one partition and come in commit
--             order; a header text a key cannot be (empty, or longer than 255 bytes) is replaced
--             by 'md5:' and its md5 in hex (stable: a row always gets the same key).  An UPDATE
--             that changes the key is sent under the new key.  Sent without a key: on a queue of
--             one partition (the key places nothing there; send costs less than send_keyed), on a
--             sharded queue (a key whose slot another shard owns would fail the writer's
--             statement; the table's events stay on the writer's shard anyway), a TRUNCATE (one
--             event for the whole table), and a row whose one-column key is NULL (key columns
--             must be not null).
-- Raises:     what pglogq.send and send_keyed raise (PQ001 the queue was dropped, PQ006 the row is
--             larger than the queue's max_payload_bytes): the writer's statement fails, nothing is
--             half captured.
-- Tables:     event (through send or send_keyed), queue (read: its partitions, sharded).
-- Runs as the schema's owner (SECURITY DEFINER), so that writers of the table need no pglogq role;
-- it does one thing, pglogq.send (or send_keyed), with the queue fixed when the trigger was made.  Only a role
-- with EXECUTE on it (pglogq_writer) can make a trigger that calls it: a table owner without
-- pglogq_writer cannot use it to write into a queue.
CREATE OR REPLACE FUNCTION pglogq.capture_row()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    op text := lower(TG_OP);
    tbl text := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
    keys text[];
    n jsonb;
    o jsonb;
    src jsonb;
    pk jsonb;
    opk jsonb;
    key text;
    body jsonb;
    keyed boolean;
BEGIN
    IF TG_LEVEL = 'STATEMENT' THEN  -- TRUNCATE: one event for the whole table, no key
        PERFORM pglogq.send(TG_ARGV[0], jsonb_build_object('op', op, 'table', tbl), op,
                            jsonb_build_object('table', tbl));
        RETURN NULL;
    END IF;
    keys := TG_ARGV[2]::text[];
    IF TG_OP <> 'DELETE' THEN
        n := to_jsonb(NEW);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        o := to_jsonb(OLD);
    END IF;
    src := coalesce(n, o);
    IF cardinality(keys) = 1 THEN
        pk := jsonb_build_object(keys[1], src -> keys[1]);
        key := src ->> keys[1];
    ELSE
        SELECT jsonb_object_agg(u.k, src -> u.k), jsonb_agg(src -> u.k ORDER BY u.i)::text
          INTO pk, key
          FROM unnest(keys) WITH ORDINALITY AS u(k, i);
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF cardinality(keys) = 1 THEN
            IF o -> keys[1] IS DISTINCT FROM n -> keys[1] THEN
                opk := jsonb_build_object(keys[1], o -> keys[1]);
            END IF;
        ELSIF EXISTS (SELECT 1 FROM unnest(keys) k WHERE o -> k IS DISTINCT FROM n -> k) THEN
            SELECT jsonb_object_agg(k, o -> k) INTO opk FROM unnest(keys) k;
        END IF;
    END IF;
    IF TG_ARGV[3] <> '' THEN  -- include list: these columns only (columns added later are not)
        IF n IS NOT NULL THEN
            SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') INTO n
              FROM jsonb_each(n) e WHERE e.key = ANY (TG_ARGV[3]::text[]);
        END IF;
        IF o IS NOT NULL THEN
            SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') INTO o
              FROM jsonb_each(o) e WHERE e.key = ANY (TG_ARGV[3]::text[]);
        END IF;
    ELSIF TG_ARGV[4] <> '' THEN  -- exclude list
        n := n - TG_ARGV[4]::text[];
        o := o - TG_ARGV[4]::text[];
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF n = o AND opk IS NULL THEN
            RETURN NULL;  -- nothing captured changed
        END IF;
        IF TG_ARGV[1] = 'changed' THEN
            SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') INTO o
              FROM jsonb_each(o) e WHERE n -> e.key IS DISTINCT FROM e.value;
        ELSIF TG_ARGV[1] = 'none' THEN
            o := NULL;
        END IF;
    ELSIF TG_OP = 'DELETE' AND TG_ARGV[1] = 'none' THEN
        o := NULL;
    END IF;
    body := jsonb_build_object('op', op, 'table', tbl, 'key', pk);
    IF n IS NOT NULL THEN
        body := body || jsonb_build_object('new', n);
    END IF;
    IF o IS NOT NULL THEN
        body := body || jsonb_build_object('old', o);
    END IF;
    IF opk IS NOT NULL THEN
        body := body || jsonb_build_object('old_key', opk);
    END IF;
    -- the key places events only on a queue of several partitions; elsewhere send's short path
    -- (send_keyed costs about 2.5 times as much per row)
    SELECT q.partitions > 1 AND NOT q.sharded INTO keyed FROM pglogq.queue q WHERE q.queue_name = TG_ARGV[0];
    IF key IS NULL OR keyed IS NOT TRUE THEN  -- (not found: send says the queue is unknown)
        PERFORM pglogq.send(TG_ARGV[0], body, op, jsonb_build_object('key', key, 'table', tbl));
    ELSE
        PERFORM pglogq.send_keyed(TG_ARGV[0], body,
                                  CASE WHEN key = '' OR octet_length(key) > 255 THEN 'md5:' || md5(key) ELSE key END,
                                  op, jsonb_build_object('key', key, 'table', tbl));
    END IF;
    RETURN NULL;
END $$;
