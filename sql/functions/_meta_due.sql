-- pglogq._meta_due(): whether the metadata epoch switch is due (the one owner of that rule).
-- Parameters: none.
-- Returns:    true 5 minutes after the last switch, or 10 s after it while something holds
--             the xmin horizon back (a transaction or snapshot of this database open for 5 s or
--             more, an old prepared transaction of it, a replication slot's xmin), or 10 s after
--             it when the owner of this function may not see other sessions' xmin (neither
--             superuser nor member of pg_read_all_stats).
-- Raises:     nothing.
-- Tables:     none (pg_stat_activity, pg_prepared_xacts, pg_replication_slots, pg_roles).
-- A switch stalls the hot path while its TRUNCATEs hold their tables (each rebuilds the table's
-- indexes, and before PostgreSQL 17 each index build fsyncs its file: a switch took 30 to 170 ms
-- on a busy disk, the whole of the latency tail), so it is made every 10 s only while the holder
-- state's dead versions cannot be vacuumed and only the switch frees them; otherwise vacuum and
-- HOT pruning keep the state small, and a switch every 5 minutes drops the old ticks.
-- maint_operations asks it on every pass, maint_rotate_meta before it switches: asked only by
-- the switch, the daemon ran maint_run('meta') twice a second for nothing.
CREATE OR REPLACE FUNCTION pglogq._meta_due()
RETURNS boolean LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    age numeric := extract(epoch FROM clock_timestamp()) - coalesce(pg_sequence_last_value('pglogq.meta_epoch_time'), 0);
BEGIN
    IF age < 10 THEN
        RETURN false;
    END IF;
    IF age >= 300 OR NOT ((SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user)
                          OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')) THEN
        RETURN true;
    END IF;
    -- this database's sessions (vacuum of its tables looks at those alone, since PostgreSQL 14)
    -- and the cluster's replication slots
    RETURN EXISTS (SELECT 1 FROM pg_stat_activity a
                    WHERE a.datname = current_database() AND a.backend_xmin IS NOT NULL
                      AND a.pid <> pg_backend_pid() AND a.xact_start < clock_timestamp() - interval '5 s')
        OR EXISTS (SELECT 1 FROM pg_prepared_xacts x
                    WHERE x.database = current_database() AND x.prepared < clock_timestamp() - interval '5 s')
        OR EXISTS (SELECT 1 FROM pg_replication_slots r WHERE r.xmin IS NOT NULL);
END $$;
