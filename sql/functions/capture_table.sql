-- pglogq.capture_table(table_name, queue_name, ...): capture a table's row changes into a queue.
-- Parameters: table_name  the table (a plain or partitioned table outside schema pglogq)
--             queue_name  the queue that receives one event per inserted, updated or deleted row
--                         and one per TRUNCATE (see pglogq.capture_row for the event's shape)
--             include_columns  capture these columns only (columns added later are left out);
--             exclude_columns  capture every column but these (columns added later are captured);
--                         at most one of the two, NULL for every column
--             key_columns  the columns that identify a row (default: the primary key; a table
--                         without a primary key needs them); the event's "key" header, and
--                         its key on a queue of several partitions (see capture_row)
--             old_values  what an UPDATE carries of the old row: 'changed' (the old values of the
--                         changed columns, default), 'full' (the whole old row) or 'none';
--                         a DELETE carries the whole old row unless 'none'
--             only_if  a JSON object: capture only rows that contain it (to_jsonb(row) @> only_if,
--                         the new row for INSERT, the old for DELETE, either for UPDATE); it
--                         becomes the triggers' WHEN clause, so other rows cost nothing
-- Returns:    true if the table was newly captured into this queue, false if an existing capture
--             was replaced (its options changed).
-- Raises:     PQ001 unknown queue; PQ004 invalid queue name; PQ070 the relation cannot be
--             captured (not a table, or one of pglogq's); PQ071 no primary key and no key_columns;
--             PQ072 invalid column list (unknown, NULL or repeated column, empty include list,
--             include and exclude both given); PQ073 invalid old_values or only_if;
--             42501 the caller may not create triggers on the table or lacks pglogq_writer.
-- Tables:     none of pglogq's: it creates four triggers on the captured table (pglogq_cap_i_,
--             _u_, _d_ and _t_ followed by the queue name; a later call replaces them).
-- Runs as the caller (SECURITY INVOKER), so PostgreSQL itself checks that the caller may create
-- triggers on the table (TRIGGER privilege) and may execute pglogq.capture_row (pglogq_writer).
CREATE OR REPLACE FUNCTION pglogq.capture_table(
    table_name regclass, queue_name text, include_columns text[] DEFAULT NULL,
    exclude_columns text[] DEFAULT NULL, key_columns text[] DEFAULT NULL,
    old_values text DEFAULT 'changed', only_if jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY INVOKER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    kind "char";
    cols text[];
    keys text[];
    bad text[];
    what text;
    args text;
    cond_new text := '';
    cond_old text := '';
    cond_any text := '';
    existed boolean;
BEGIN
    IF capture_table.queue_name IS NULL THEN
        RAISE EXCEPTION 'invalid queue name: must not be empty' USING ERRCODE = 'PQ004';
    END IF;
    PERFORM 1 FROM pglogq.queue_info(capture_table.queue_name);  -- PQ001 / PQ004
    SELECT c.relkind INTO kind FROM pg_class c
     WHERE c.oid = capture_table.table_name AND c.relnamespace <> 'pglogq'::regnamespace
       AND c.relnamespace <> 'pg_catalog'::regnamespace;
    IF capture_table.table_name IS NULL OR kind IS NULL OR kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'cannot capture %: only tables outside schemas pglogq and pg_catalog can be captured',
            coalesce(capture_table.table_name::text, 'NULL')
            USING ERRCODE = 'PQ070', HINT = 'pass a plain or partitioned table; nothing was changed';
    END IF;
    SELECT array_agg(a.attname::text ORDER BY a.attnum) INTO cols FROM pg_attribute a
     WHERE a.attrelid = capture_table.table_name AND a.attnum > 0 AND NOT a.attisdropped;
    IF include_columns IS NOT NULL AND exclude_columns IS NOT NULL THEN
        RAISE EXCEPTION 'give include_columns or exclude_columns, not both' USING ERRCODE = 'PQ072';
    END IF;
    IF include_columns IS NOT NULL AND cardinality(include_columns) = 0 THEN
        RAISE EXCEPTION 'include_columns is empty: it would capture no column' USING ERRCODE = 'PQ072',
            HINT = 'pass NULL to capture every column';
    END IF;
    FOREACH what IN ARRAY ARRAY['include_columns', 'exclude_columns', 'key_columns'] LOOP
        bad := CASE what WHEN 'include_columns' THEN include_columns
                         WHEN 'exclude_columns' THEN exclude_columns ELSE key_columns END;
        CONTINUE WHEN bad IS NULL;
        IF array_position(bad, NULL) IS NOT NULL THEN
            RAISE EXCEPTION '% holds a NULL', what USING ERRCODE = 'PQ072';
        END IF;
        IF cardinality(bad) <> (SELECT count(DISTINCT x) FROM unnest(bad) x) THEN
            RAISE EXCEPTION '% names a column twice', what USING ERRCODE = 'PQ072';
        END IF;
        bad := ARRAY(SELECT x FROM unnest(bad) x WHERE x <> ALL (cols));
        IF cardinality(bad) > 0 THEN
            RAISE EXCEPTION '% names columns % has not: %', what, capture_table.table_name,
                array_to_string(bad, ', ')
                USING ERRCODE = 'PQ072', HINT = 'its columns: ' || array_to_string(cols, ', ');
        END IF;
    END LOOP;
    IF key_columns IS NOT NULL AND cardinality(key_columns) = 0 THEN
        RAISE EXCEPTION 'key_columns is empty' USING ERRCODE = 'PQ072',
            HINT = 'pass NULL to key by the primary key';
    END IF;
    keys := coalesce(key_columns, ARRAY(
        SELECT a.attname::text FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord), pg_attribute a
         WHERE i.indrelid = capture_table.table_name AND i.indisprimary
           AND a.attrelid = i.indrelid AND a.attnum = k.attnum
         ORDER BY k.ord));
    IF cardinality(keys) = 0 THEN
        RAISE EXCEPTION 'table % has no primary key: say which columns identify a row', capture_table.table_name
            USING ERRCODE = 'PQ071',
                  HINT = 'add a primary key, or pass key_columns => ARRAY[...] naming columns that are unique '
                         'and not null (a ctid is no key: it changes with every UPDATE); nothing was changed';
    END IF;
    IF old_values IS NULL OR old_values NOT IN ('changed', 'full', 'none') THEN
        RAISE EXCEPTION 'invalid old_values %: use changed, full or none', coalesce(quote_literal(old_values), 'NULL')
            USING ERRCODE = 'PQ073';
    END IF;
    IF only_if IS NOT NULL AND jsonb_typeof(only_if) <> 'object' THEN
        RAISE EXCEPTION 'invalid only_if: a JSON object is expected, got %', jsonb_typeof(only_if)
            USING ERRCODE = 'PQ073', HINT = 'e.g. {"status": "paid"}: rows whose columns contain these values';
    END IF;
    IF only_if IS NOT NULL AND only_if <> '{}' THEN
        cond_new := format('WHEN (pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.@>) %L::jsonb)', only_if);
        cond_old := format('WHEN (pg_catalog.to_jsonb(OLD) OPERATOR(pg_catalog.@>) %L::jsonb)', only_if);
        cond_any := format('WHEN (pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.@>) %L::jsonb'
                           ' OR pg_catalog.to_jsonb(OLD) OPERATOR(pg_catalog.@>) %L::jsonb)', only_if, only_if);
    END IF;
    args := format('%L, %L, %L, %L, %L, %L', capture_table.queue_name, old_values, keys::text,
                   coalesce(include_columns::text, ''), coalesce(exclude_columns::text, ''),
                   CASE WHEN only_if IS NULL OR only_if = '{}' THEN '' ELSE only_if::text END);
    existed := EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = capture_table.table_name
                          AND t.tgname = 'pglogq_cap_i_' || capture_table.queue_name);
    EXECUTE format('CREATE OR REPLACE TRIGGER %I AFTER INSERT ON %s FOR EACH ROW %s '
                   'EXECUTE FUNCTION pglogq.capture_row(%s)',
                   'pglogq_cap_i_' || capture_table.queue_name, capture_table.table_name, cond_new, args);
    EXECUTE format('CREATE OR REPLACE TRIGGER %I AFTER UPDATE ON %s FOR EACH ROW %s '
                   'EXECUTE FUNCTION pglogq.capture_row(%s)',
                   'pglogq_cap_u_' || capture_table.queue_name, capture_table.table_name, cond_any, args);
    EXECUTE format('CREATE OR REPLACE TRIGGER %I AFTER DELETE ON %s FOR EACH ROW %s '
                   'EXECUTE FUNCTION pglogq.capture_row(%s)',
                   'pglogq_cap_d_' || capture_table.queue_name, capture_table.table_name, cond_old, args);
    EXECUTE format('CREATE OR REPLACE TRIGGER %I AFTER TRUNCATE ON %s FOR EACH STATEMENT '
                   'EXECUTE FUNCTION pglogq.capture_row(%s)',
                   'pglogq_cap_t_' || capture_table.queue_name, capture_table.table_name, args);
    RETURN NOT existed;
END $$;
