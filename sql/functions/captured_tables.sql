-- pglogq.captured_tables(for_queue): the tables whose changes are captured (pglogq.capture_table).
-- Parameters: for_queue  a queue name, NULL for every queue
-- Returns:    one row per captured table and queue: table_name, queue_name, key_columns,
--             include_columns, exclude_columns (NULL when not given), old_values, only_if
--             (NULL when not given).  Read from the triggers themselves (pg_trigger), so a
--             dropped table or a trigger dropped by hand is never listed.
-- Raises:     nothing (an unknown queue lists nothing).
-- Tables:     none of pglogq's (pg_trigger).
CREATE OR REPLACE FUNCTION pglogq.captured_tables(for_queue text DEFAULT NULL)
RETURNS TABLE (table_name regclass, queue_name text, key_columns text[], include_columns text[],
               exclude_columns text[], old_values text, only_if jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    t record;
    a text[];
    s integer;
BEGIN
    FOR t IN SELECT tr.tgrelid, tr.tgargs FROM pg_trigger tr
              WHERE tr.tgfoid = 'pglogq.capture_row()'::regprocedure AND tr.tgname LIKE 'pglogq\_cap\_i\_%'
              ORDER BY tr.tgrelid::regclass::text, tr.tgname LOOP
        -- tgargs: the trigger's arguments, each followed by a zero byte
        a := '{}';
        s := 0;
        FOR i IN 0 .. length(t.tgargs) - 1 LOOP
            IF get_byte(t.tgargs, i) = 0 THEN
                a := a || convert_from(substring(t.tgargs FROM s + 1 FOR i - s), 'UTF8');
                s := i + 1;
            END IF;
        END LOOP;
        CONTINUE WHEN cardinality(a) < 6 OR (for_queue IS NOT NULL AND a[1] <> for_queue);
        table_name := t.tgrelid;
        queue_name := a[1];
        old_values := a[2];
        key_columns := a[3]::text[];
        include_columns := nullif(a[4], '')::text[];
        exclude_columns := nullif(a[5], '')::text[];
        only_if := nullif(a[6], '')::jsonb;
        RETURN NEXT;
    END LOOP;
END $$;
