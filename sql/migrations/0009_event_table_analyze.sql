-- 0009_event_table_analyze: let autovacuum ANALYZE the event tables (it never needs to VACUUM them).
--
-- 0001 created the event children with autovacuum off, which also stopped auto-analyze: with no
-- statistics the planner guessed, and probes such as the ticker's "any committed event not yet
-- ticked?" could become scans of a million-row child.  Event tables have no dead tuples (nothing
-- is updated or deleted; TRUNCATE empties them), so only the insert-triggered vacuum is turned off.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS name FROM pg_class c
              WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relkind = 'r'
                AND c.relname ~ '^event_[0-9]+_[0-9]+$' LOOP
        EXECUTE format('ALTER TABLE %s RESET (autovacuum_enabled)', r.name);
        EXECUTE format('ALTER TABLE %s SET (autovacuum_vacuum_insert_threshold = -1)', r.name);
    END LOOP;
END $$;
