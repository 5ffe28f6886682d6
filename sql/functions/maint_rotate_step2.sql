-- pglogq.maint_rotate_step2(queue_name): record that a transaction after the switch has begun.
-- Parameters: queue_name
-- Returns:    true if recorded, false if there was nothing to record (or another session holds
--             the queue row: then nothing changed, run it again).
-- Raises:     PQ001 unknown queue; PQ014 called in the same transaction as step 1.
-- Tables:     queue (update).
-- Must run in its own transaction after step 1 committed; the next rotation waits until every
-- consumer is past this transaction id.
CREATE OR REPLACE FUNCTION pglogq.maint_rotate_step2(queue_name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    -- SKIP LOCKED: busy (a rotation, a config change, a drop): try again on the next pass;
    -- two sessions running step 2 of queues in opposite orders never wait on each other
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = q.queue_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF q.switch_step2 IS NOT NULL THEN
        RETURN false;
    END IF;
    IF q.switch_step1 = pg_current_xact_id() THEN
        RAISE EXCEPTION 'rotation step 2 must run in a later transaction than step 1'
            USING ERRCODE = 'PQ014';
    END IF;
    UPDATE pglogq.queue x SET switch_step2 = pg_current_xact_id()
     WHERE x.queue_id = q.queue_id AND x.switch_step2 IS NULL;
    RETURN FOUND;
END $$;
