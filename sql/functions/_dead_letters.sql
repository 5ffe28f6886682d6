-- pglogq._dead_letters(queue_id, sub_id, msg_type, cutoff, max_rows): the dead letters a
-- resolved filter selects (the one owner of what the dead-letter filters match).
-- Parameters: queue_id, sub_id, cutoff  from pglogq._dead_letter_filter (sub_id NULL: every
--             consumer's; cutoff NULL: any age); msg_type  only events of this type (NULL:
--             any); max_rows  at most this many, oldest first (NULL: all)
-- Returns:    setof dead_id, oldest first.
-- Raises:     nothing (pglogq._dead_letter_filter checks the filters, before).
-- Tables:     dead_letter (read).
-- dlq_inspect, dlq_count, dlq_replay_all, dlq_purge and dlq_search take the filters in one order
-- and select through this function, so they always agree on what a filter matches.  It checks
-- nothing: wherever a query calls it, and whether or not the executor calls it at all, the
-- checks have run already.
CREATE OR REPLACE FUNCTION pglogq._dead_letters(
    queue_id integer, sub_id integer, msg_type text, cutoff timestamptz, max_rows bigint)
RETURNS SETOF bigint LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT d.dead_id FROM pglogq.dead_letter d
     WHERE d.queue_id = _dead_letters.queue_id
       AND (_dead_letters.sub_id IS NULL OR d.sub_id = _dead_letters.sub_id)
       AND (_dead_letters.msg_type IS NULL OR d.ev_type = _dead_letters.msg_type)
       AND (_dead_letters.cutoff IS NULL OR d.failed_at <= _dead_letters.cutoff)
     ORDER BY d.dead_id
     LIMIT _dead_letters.max_rows;
$$;
