-- pglogq.schedule_remove(queue_name, name): stop a periodic send.
-- Parameters: queue_name; name  the schedule's name
-- Returns:    true.
-- Raises:     PQ001 unknown queue; PQ067 no schedule of that name in the queue.
-- Tables:     schedule, schedule_run (delete).
-- Events it sent already stay in the queue.  A ticker sending one of its due times right now
-- finishes first (the row lock); none is sent after this call commits.
CREATE OR REPLACE FUNCTION pglogq.schedule_remove(queue_name text, name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    DELETE FROM pglogq.schedule x WHERE x.queue_id = q.queue_id AND x.name = schedule_remove.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown schedule % in queue "%"',
            CASE WHEN name IS NULL THEN 'NULL' ELSE quote_ident(left(name, 80)) END, q.queue_name
            USING ERRCODE = 'PQ067', HINT = 'pglogq.schedule_list(queue) lists them';
    END IF;
    RETURN true;
END $$;
