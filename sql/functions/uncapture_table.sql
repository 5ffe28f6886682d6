-- pglogq.uncapture_table(table_name, queue_name): stop capturing a table's changes.
-- Parameters: table_name  the captured table
--             queue_name  the queue it is captured into; NULL: every queue
-- Returns:    how many captures were removed (0 when the table was not captured: nothing changes).
-- Raises:     42501 the caller does not own the table (PostgreSQL's rule for DROP TRIGGER).
-- Tables:     none of pglogq's: drops the triggers pglogq.capture_table made on the table.
-- Runs as the caller (SECURITY INVOKER): PostgreSQL checks that the caller owns the table.
-- Events already captured stay in the queue.
CREATE OR REPLACE FUNCTION pglogq.uncapture_table(table_name regclass, queue_name text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY INVOKER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    t record;
    removed integer := 0;
BEGIN
    FOR t IN SELECT tr.tgname FROM pg_trigger tr
              WHERE tr.tgrelid = uncapture_table.table_name
                AND tr.tgfoid = 'pglogq.capture_row()'::regprocedure
                AND tr.tgname ~ '^pglogq_cap_[iudt]_'
                AND (uncapture_table.queue_name IS NULL
                     OR substr(tr.tgname, 14) = uncapture_table.queue_name)
              ORDER BY tr.tgname LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, uncapture_table.table_name);
        IF t.tgname LIKE 'pglogq\_cap\_i\_%' THEN
            removed := removed + 1;
        END IF;
    END LOOP;
    RETURN removed;
END $$;
