-- roles.sql: the three pglogq roles and their grants.  Re-applied on every install/upgrade.
--   pglogq_writer  produce: send, send_batch, cancel, queue_info
--   pglogq_reader  consume: receive, ack, nack, heartbeat/progress, queue_info, consumer_info
--   pglogq_admin   both, plus queues, subscriptions, ticker, maintenance, DLQ, seek
-- Writer and reader are siblings (neither includes the other).  PUBLIC gets nothing: every
-- function is SECURITY DEFINER with a pinned search_path, so roles need EXECUTE only.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pglogq_writer') THEN
        CREATE ROLE pglogq_writer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pglogq_reader') THEN
        CREATE ROLE pglogq_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pglogq_admin') THEN
        CREATE ROLE pglogq_admin NOLOGIN;
    END IF;
END $$;

GRANT pglogq_writer, pglogq_reader TO pglogq_admin;

REVOKE ALL ON SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pglogq FROM PUBLIC;
GRANT USAGE ON SCHEMA pglogq TO pglogq_writer, pglogq_reader, pglogq_admin;

-- grants are derived from the table below: one place says who may call what
DO $$
DECLARE
    r record;
    roles_of jsonb := '{
        "send": ["pglogq_writer"], "send_batch": ["pglogq_writer"], "send_batch_json": ["pglogq_writer"], "cancel": ["pglogq_writer"],
        "queue_info": ["pglogq_writer", "pglogq_reader"],
        "receive": ["pglogq_reader"], "ack": ["pglogq_reader"], "nack": ["pglogq_reader"],
        "heartbeat": ["pglogq_reader"], "report_progress": ["pglogq_reader"],
        "consumer_info": ["pglogq_reader"]
    }';
    who text;
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS sig, p.proname
               FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname !~ '^_' LOOP
        IF roles_of ? r.proname THEN
            FOR who IN SELECT jsonb_array_elements_text(roles_of -> r.proname) LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', r.sig, who);
            END LOOP;
        END IF;
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pglogq_admin', r.sig);
    END LOOP;
END $$;
GRANT SELECT ON ALL TABLES IN SCHEMA pglogq TO pglogq_admin;
-- every client checks the schema version (Client.schema_versions)
GRANT SELECT ON pglogq.schema_version TO pglogq_writer, pglogq_reader;
-- consumers may watch their own work in flight (views.sql)
DO $$
BEGIN
    IF to_regclass('pglogq.in_flight') IS NOT NULL THEN
        GRANT SELECT ON pglogq.in_flight TO pglogq_reader;
    END IF;
END $$;
