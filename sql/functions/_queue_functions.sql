-- pglogq._queue_functions(queue_id, make): make (or drop) one queue's copies of the functions of
-- receive's path (and of jobs', cancel's, consumer_info's, nack's, mark_started's, lookup's,
-- seek_plan's, queue_info's and ack_receive's), whose statements read that queue's own tick and event tables.
-- Parameters: queue_id  the queue's id; make  true (default): drop the queue's copies and make
--             them afresh from the installed functions; false: only drop them
-- Returns:    the number of copies made.
-- Raises:     nothing of its own.
-- Tables:     none (functions pglogq._q<queue_id>_<generation>_<name> created, and every
--             pglogq._q<queue_id>_* of pglogq's dropped; owned by the owner of the function
--             they copy, granted to nobody).
-- Why copies: receive's statements run with cached generic plans (see its header).  A generic
-- plan over the partitioned tick or event table cannot prune at plan time, and PostgreSQL
-- before 18 locks every partition of such a plan when it starts (AcquireExecutorLocks): with
-- the shared tables one receive locked the tables and indexes of every queue, ~23 a queue
-- (1,188 locks at 50 queues), until the lock table ran out (53200) at ~150 queues.  A copy
-- reads pglogq.event_<id> and pglogq.tick_<id> instead: still generic, cached plans, which lock
-- this queue's tables only: 59 locks at 1, 2, 50 and 1,000 queues.  Measured on PostgreSQL 15
-- with callgrind, backend instructions per send + force_tick + receive + ack (1-event pages,
-- analyzed tables, 200 iterations after 20): 1 queue 5.000 M shared functions, 5.046 M copies
-- (+0.9 %: the dispatch, one dynamic call); 50 queues 5.523 M shared, 5.464 M copies;
-- partitioned (4), 1 queue: 8.709 M shared, 8.678 M copies.  The other way to prune,
-- plan_cache_mode = force_custom_plan on receive's path (every statement planned on every
-- call), took 5.123 M at 1 queue and 5.593 M at 50 (+2.4 % over the copies), and its planning
-- cost follows the data: on a database holding ~2,500 unrotated ticks and events it took 1.9x
-- the backend CPU time per iteration of the shared functions (2,857 against 1,532 us).
-- Made by: create_queue (its queue), and receive when the queue has no copies of the installed
-- generation (the first receive after an install that changed any function file, or after
-- they were dropped): an install never replaces them all at once (a DROP or CREATE OR REPLACE
-- takes one object lock per function, in the install's one transaction: 7,000 at 1,000 queues,
-- more than the lock table holds).  Dropped by drop_queue.  The generation is the digest of
-- the function files, written by the install where the files say @copies@ (pglogq/schema.py).
-- A copy is the installed function's definition (pg_get_functiondef) with: its name prefixed
-- (and so the qualifier of its parameters); calls of the other copied functions made to their
-- copies; a forced custom plan made a forced generic one; every reference to pglogq.event /
-- pglogq.tick as a table (not as a row type: followed by ; , ) % [ or .) made to the queue's own
-- partition; in receive (and jobs, cancel, _cancel_handed), its dispatch to the copy cut out
-- (between its two "queue copy" comment lines).
-- check_function_bodies is off in here: a copy is an installed function's body, validated when it
-- was installed, and PL/pgSQL's validator compiles the body it checks into the session's cache
-- of compiled functions, where it stays: 19 copies a queue kept about 2.5 MB a queue in the
-- session that made it (a session that made 9,000 queues grew to 23 GB, and was killed).
CREATE OR REPLACE FUNCTION pglogq._queue_functions(queue_id integer, make boolean DEFAULT true)
RETURNS integer LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET check_function_bodies = off AS $$
DECLARE
    -- the functions of receive's path (and jobs', cancel's check, consumer_info's tick
    -- figures, nack's, mark_started's, lookup's, seek_plan's and one queue's queue_info) whose
    -- statements read the tick or event table
    names text[] := ARRAY['receive', '_take_batch', '_batch_page', '_crashed_page', '_stream_pick',
                          '_stream_skip', '_share_lease', 'jobs', '_open_batch_events', 'cancel',
                          '_cancel_handed', '_consumer_ticks', 'nack', 'mark_started', 'lookup',
                          '_event_txid_floor', '_retries', 'seek_plan', 'queue_info', '_share_step'];
    -- the copies' names: the queue's id, then the generation of the installed functions (the
    -- install writes it here and in receive's dispatch)
    mine text := '_q' || _queue_functions.queue_id || '_';
    prefix text := mine || '@copies@_';
    r record;
    src text;
    made integer := 0;
BEGIN
    FOR r IN SELECT p.oid FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pglogq'::regnamespace
                AND p.proname LIKE replace(mine, '_', '\_') || '%'
                AND p.proconfig @> ARRAY['search_path=pglogq, pg_catalog, pg_temp'] LOOP  -- ours only
        EXECUTE format('DROP FUNCTION %s', r.oid::regprocedure);
    END LOOP;
    IF NOT make THEN
        RETURN 0;
    END IF;
    FOR r IN SELECT p.oid, p.proname::text AS name, p.proowner FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname = ANY (names)
              ORDER BY p.oid LOOP
        src := pg_catalog.pg_get_functiondef(r.oid);
        src := regexp_replace(src, '^(\w+ \w+ \w+ \w+ pglogq\.)' || r.name || '\(', '\1' || prefix || r.name || '(');
        src := regexp_replace(src, '\n[^\n]*-- queue copy: from here.*?-- queue copy: to here[^\n]*', '');
        src := regexp_replace(src, '\mpglogq\.(' || array_to_string(names, '|') || ')\(',
                              'pglogq.' || prefix || '\1(', 'g');
        src := regexp_replace(src, '\mpglogq\.(event|tick)\M(?![;,)%\[.])',
                              'pglogq.\1_' || _queue_functions.queue_id, 'g');
        src := regexp_replace(src, '([^.\w])' || r.name || '\.(?=[a-z_])', '\1' || prefix || r.name || '.', 'g');
        -- a shared function planned on every call so as to prune to the queue's partitions: its
        -- copy reads them by name, so a cached generic plan locks no other queue's
        src := replace(src, 'SET plan_cache_mode TO ''force_custom_plan''', 'SET plan_cache_mode TO ''force_generic_plan''');
        EXECUTE src;
        EXECUTE format('REVOKE ALL ON FUNCTION pglogq.%I FROM PUBLIC', prefix || r.name);
        -- the original's owner (a superuser's install must not make a SECURITY DEFINER copy its own)
        IF r.proowner <> (SELECT p.proowner FROM pg_catalog.pg_proc p
                           WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname = prefix || r.name) THEN
            EXECUTE format('ALTER FUNCTION pglogq.%I OWNER TO %I', prefix || r.name, r.proowner::regrole);
        END IF;
        made := made + 1;
    END LOOP;
    RETURN made;
END $$;
