-- pglogq.schedule_due(max_rows): the schedules the ticker must handle now, the longest due first,
-- at most max_rows (the ticker's bound per pass; the rest come in the next pass).
-- Parameters: max_rows  1..100000
-- Returns:    rows (queue, name, cron, missed, created_at, next_due, now): the schedules whose
--             next_due has come (oldest next_due first), then those not planned yet (next_due
--             NULL); now is the time the rows were selected at (clock_timestamp()).
-- Raises:     PQ019 max_rows out of range.
-- Tables:     schedule, queue (read).
-- Both halves are probes of schedule_due_idx (next_due <= a parameter, next_due IS NULL) cut
-- by the LIMIT: a pass reads the due schedules it handles, never the others (a pass with
-- nothing due reads no row at all, whatever number of schedules exist).
CREATE OR REPLACE FUNCTION pglogq.schedule_due(max_rows integer)
RETURNS TABLE (queue text, name text, cron text, missed text, created_at timestamptz,
               next_due timestamptz, now timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    due_by timestamptz := clock_timestamp();
BEGIN
    IF max_rows IS NULL OR max_rows < 1 OR max_rows > 100000 THEN
        RAISE EXCEPTION 'invalid max_rows %: use 1..100000', coalesce(max_rows::text, 'NULL')
            USING ERRCODE = 'PQ019';
    END IF;
    RETURN QUERY
    SELECT x.queue_name, s.name, s.cron, s.missed, s.created_at, s.next_due, due_by
      FROM ((SELECT d.schedule_id, d.queue_id, d.name, d.cron, d.missed, d.created_at, d.next_due
               FROM pglogq.schedule d
              WHERE d.next_due <= due_by
              ORDER BY d.next_due
              LIMIT max_rows)
            UNION ALL
            (SELECT u.schedule_id, u.queue_id, u.name, u.cron, u.missed, u.created_at, u.next_due
               FROM pglogq.schedule u
              WHERE u.next_due IS NULL
              LIMIT max_rows)
            LIMIT max_rows) s
      JOIN pglogq.queue x ON x.queue_id = s.queue_id
     ORDER BY s.next_due NULLS LAST, s.schedule_id;
END $$;
