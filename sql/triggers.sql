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

-- the view pglogq.subscription: an UPDATE of its state columns goes to pglogq.sub_state
DO $triggers$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'pglogq.subscription'::regclass AND tgname = 'subscription_update') THEN
        CREATE TRIGGER subscription_update INSTEAD OF UPDATE ON pglogq.subscription
            FOR EACH ROW EXECUTE FUNCTION pglogq._subscription_update();
    END IF;
END
$triggers$;

-- dead_letter: pglogq.dead_letter_count follows every insert, delete and truncate
DO $triggers$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'pglogq.dead_letter'::regclass AND tgname = 'dead_letter_added') THEN
        CREATE TRIGGER dead_letter_added AFTER INSERT ON pglogq.dead_letter
            REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pglogq._dead_letter_counted();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'pglogq.dead_letter'::regclass AND tgname = 'dead_letter_removed') THEN
        CREATE TRIGGER dead_letter_removed AFTER DELETE ON pglogq.dead_letter
            REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pglogq._dead_letter_counted();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'pglogq.dead_letter'::regclass AND tgname = 'dead_letter_truncated') THEN
        CREATE TRIGGER dead_letter_truncated AFTER TRUNCATE ON pglogq.dead_letter
            FOR EACH STATEMENT EXECUTE FUNCTION pglogq._dead_letter_counted();
    END IF;
END
$triggers$;
