-- pglogq._event_outcomes(sub, wanted, since): one event's runs in a consumer's outcome log (the one
-- owner of "where is an event in the log").
-- Parameters: sub  the consumer's sub_id; wanted  the event's id; since  leave out rows that
--             finished before it (the queue's history_retention)
-- Returns:    one row per run of the event (outcome, attempt, worker, ev_type, started_at,
--             finished_at, error, result, seq), oldest first (by its end, then the order recorded).
-- Raises:     nothing.
-- Tables:     outcome (read).
-- A row of the log holds a group of runs (record_outcomes): the rows whose id range contains the
-- id (outcome_ids_idx, GiST: the ranges of different rows overlap), of this consumer, that list
-- the id; the run's own times are at the id's position in the row's arrays (a row without ids
-- holds the ids of its range, in order: the position is the id's offset in it).
CREATE OR REPLACE FUNCTION pglogq._event_outcomes(sub integer, wanted bigint, since timestamptz)
RETURNS TABLE (outcome text, attempt integer, worker text, ev_type text, started_at timestamptz,
               finished_at timestamptz, error text, result jsonb, seq bigint)
LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT o.outcome, o.attempt, o.worker, coalesce(o.types[p.k], o.ev_type), to_timestamp(o.started[p.k]),
           to_timestamp(o.finished[p.k]), o.error, o.result, o.seq
      FROM pglogq.outcome o
     CROSS JOIN LATERAL (SELECT CASE WHEN o.msg_ids IS NULL THEN (wanted - lower(o.id_range) + 1)::integer
                                     ELSE array_position(o.msg_ids, wanted) END AS k) p
     WHERE o.id_range @> wanted AND o.sub_id = sub AND o.finished_at >= since AND p.k IS NOT NULL
     ORDER BY o.finished[p.k], o.seq;
$$;
