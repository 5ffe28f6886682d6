-- pglogq._outcome_runs(consumer_name, sub, row_finished_at, row_seq, before, ...): one row of the outcome log, as jobs lists it.
-- The rest of the arguments: f_lo, f_hi, only_type, max_rows.
-- Parameters: consumer_name, sub  the consumer (its name for the rows, its sub_id);
--             row_finished_at, row_seq  the row (its key in outcome_time_idx); before  only the
--             runs at positions below it (1-based; the cursor's position in its own row, else
--             131072: all); f_lo, f_hi  only runs that finished in this range (unix seconds);
--             only_type  only runs of this type (NULL: any); max_rows  at most this many
-- Returns:    jobs' rows (state is the outcome, since the run's start, finished_at its end,
--             attempts its attempt number, reason its error), last position first.
-- Raises:     nothing.
-- Tables:     outcome (read).
-- jobs calls it once per row of the log it lists (the one reader of a row's arrays in a list);
-- the row's arrays are read once (unnest), whatever the row's size; a row without ids holds those
-- of its range, in order.
CREATE OR REPLACE FUNCTION pglogq._outcome_runs(
    consumer_name text, sub integer, row_finished_at timestamptz, row_seq bigint, before integer,
    f_lo double precision, f_hi double precision, only_type text, max_rows integer)
RETURNS TABLE (consumer text, state text, msg_id bigint, type text, created_at timestamptz, worker text,
               since timestamptz, last_heartbeat timestamptz, percent numeric, stage text,
               due_at timestamptz, attempts integer, reason text, dead_id bigint, cursor text,
               finished_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT consumer_name, x.outcome, coalesce(u.m, lower(x.id_range) + u.k - 1), coalesce(u.t, x.ev_type), NULL::timestamptz, x.worker, to_timestamp(u.s),
           NULL::timestamptz, NULL::numeric, NULL::text, NULL::timestamptz, x.attempt, x.error, NULL::bigint,
           format('%s/7/%s/%s', consumer_name, (extract(epoch FROM x.finished_at) * 1000000)::bigint,
                  x.seq * 131072 + u.k),
           to_timestamp(u.f)
      FROM pglogq.outcome x
     CROSS JOIN LATERAL unnest(x.msg_ids, x.started, x.finished, x.types) WITH ORDINALITY AS u(m, s, f, t, k)
     WHERE x.sub_id = sub AND x.finished_at = row_finished_at AND x.seq = row_seq
       AND u.k < before AND u.f >= f_lo AND u.f <= f_hi
       AND (only_type IS NULL OR coalesce(u.t, x.ev_type) = only_type)
     ORDER BY u.k DESC
     LIMIT max_rows;
$$;
