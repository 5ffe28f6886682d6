-- Triggers on pglogq tables that call pglogq functions: applied on every install after the
-- functions (a migration runs before them).  Each is created only when missing, so a re-install
-- takes no lock on the table and never drops anything.

-- cancel(): re-check at COMMIT that no consumer was handed a cancelled event (pglogq._cancel_recheck)
DO $triggers$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'pglogq.cancelled'::regclass AND tgname = 'cancelled_recheck') THEN
        CREATE CONSTRAINT TRIGGER cancelled_recheck AFTER INSERT ON pglogq.cancelled
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pglogq._cancel_recheck();
    END IF;
END
$triggers$;
