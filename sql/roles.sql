-- roles.sql: the three pglogq roles and their grants.  Re-applied on every install/upgrade.
--   pglogq_writer  produce: send, send_batch, cancel, queue_info
--   pglogq_reader  consume: receive, ack, nack, heartbeat/progress, queue_info, consumer_info
--   pglogq_admin   both, plus queues, subscriptions, ticker, maintenance, DLQ, seek
-- Which function each role may call is the role column of sql/functions/MANIFEST.
-- Writer and reader are siblings (neither includes the other).  PUBLIC gets nothing: every
-- function is SECURITY DEFINER with a pinned search_path, so roles need EXECUTE only.
-- Roles are cluster-wide: the first install in a cluster creates them (needs CREATEROLE), later
-- installs in other databases find them and grant nothing that is already granted, so a
-- database owner without CREATEROLE installs once the roles exist.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['pglogq_writer', 'pglogq_reader', 'pglogq_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role "%" does not exist and role "%" may not create it', r, current_user
                    USING ERRCODE = 'PQ051',
                          DETAIL = 'roles are shared by every database of the cluster: the first install '
                                   'in a cluster creates pglogq_writer, pglogq_reader and pglogq_admin',
                          HINT = 'have a superuser or a role with CREATEROLE run the install once (or '
                                 'CREATE ROLE pglogq_writer NOLOGIN; CREATE ROLE pglogq_reader NOLOGIN; '
                                 'CREATE ROLE pglogq_admin NOLOGIN; GRANT pglogq_writer, pglogq_reader TO '
                                 'pglogq_admin), then install again; nothing was changed';
            END;
        END IF;
    END LOOP;
    FOREACH r IN ARRAY ARRAY['pglogq_writer', 'pglogq_reader'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
                        WHERE m.roleid = r::regrole AND m.member = 'pglogq_admin'::regrole) THEN
            BEGIN
                EXECUTE pg_catalog.format('GRANT %I TO pglogq_admin', r);
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'pglogq_admin is not a member of % and role "%" may not grant it', r, current_user
                    USING ERRCODE = 'PQ051',
                          HINT = pg_catalog.format('have a superuser (or a role with ADMIN OPTION on %s) run '
                                                   '"GRANT %s TO pglogq_admin", then install again; nothing '
                                                   'was changed', r, r);
            END;
        END IF;
    END LOOP;
END $$;

REVOKE ALL ON SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pglogq FROM PUBLIC;
GRANT USAGE ON SCHEMA pglogq TO pglogq_writer, pglogq_reader, pglogq_admin;

-- grants are derived from the grant map of sql/functions/MANIFEST (pglogq/schema.py puts it in
-- place of the placeholder below): one place says who may call what.  Only what is missing is
-- granted; a grant to a pglogq role that the map no longer gives is revoked (grants of yours, to
-- your own roles, are left alone: functions are replaced in place and keep them).
DO $$
DECLARE
    r record;
    roles_of jsonb := '@grant_map@';
    who text;
    wanted boolean;
    has boolean;
BEGIN
    FOR r IN SELECT p.oid, p.oid::regprocedure AS sig, p.proname, p.proacl
               FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pglogq'::regnamespace
                AND p.proconfig @> ARRAY['search_path=pglogq, pg_catalog, pg_temp'] LOOP
        FOREACH who IN ARRAY ARRAY['pglogq_writer', 'pglogq_reader', 'pglogq_admin'] LOOP
            wanted := r.proname !~ '^_'
                      AND (who = 'pglogq_admin' OR coalesce(roles_of -> r.proname ? who, false));
            has := EXISTS (SELECT 1 FROM pg_catalog.aclexplode(r.proacl) a
                            WHERE a.grantee = who::regrole AND a.privilege_type = 'EXECUTE');
            IF wanted AND NOT has THEN
                EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', r.sig, who);
            ELSIF has AND NOT wanted THEN
                EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM %I', r.sig, who);
            END IF;
        END LOOP;
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
