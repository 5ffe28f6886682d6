-- pglogq._dead_letters(queue_id, sub_id, msg_type, cutoff, max_rows, past_id, newest_first, for_msg_id, needle): the dead letters a resolved filter selects.
-- The one owner of what the dead-letter filters match.
-- Parameters: queue_id, sub_id, cutoff  from pglogq._dead_letter_filter (sub_id NULL: every
--             consumer's; cutoff NULL: any age); msg_type  only events of this type (NULL:
--             any); max_rows  at most this many (NULL: all); past_id  a keyset cursor: only
--             dead_id after this in the order (NULL: from the start); newest_first  the order:
--             dead_id descending (default: ascending, oldest first); for_msg_id  only the dead
--             letters of this message id (NULL: any); needle  only those whose type, reason,
--             payload or headers text contains this lower-case text (NULL: any)
-- Returns:    setof dead_id, in the order asked.
-- Raises:     nothing (pglogq._dead_letter_filter checks the filters, before).
-- Tables:     dead_letter (read).
-- dlq_inspect, dlq_count, dlq_replay_all, dlq_purge and dlq_search take the filters in one order
-- and select through this function, so they always agree on what a filter matches.  It checks
-- nothing: wherever a query calls it, and whether or not the executor calls it at all, the
-- checks have run already.
-- The filters, the order and the LIMIT are in one query, planned for the values of each call
-- (plan_cache_mode: a generic plan would keep "sub_id IS NULL OR ..." and lose the index): a
-- page walks (queue_id, dead_id) or (queue_id, sub_id, dead_id) in its order and stops at its
-- LIMIT, so it reads its own rows whatever number of dead letters the queue holds.  (Its rows
-- used to be every match, sorted and cut by the caller.)
CREATE OR REPLACE FUNCTION pglogq._dead_letters(
    queue_id integer, sub_id integer, msg_type text, cutoff timestamptz, max_rows bigint,
    past_id bigint DEFAULT NULL, newest_first boolean DEFAULT false, for_msg_id bigint DEFAULT NULL,
    needle text DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE plpgsql STABLE ROWS 100
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
BEGIN
    IF newest_first THEN
        RETURN QUERY
        SELECT d.dead_id FROM pglogq.dead_letter d
         WHERE d.queue_id = _dead_letters.queue_id
           AND (_dead_letters.sub_id IS NULL OR d.sub_id = _dead_letters.sub_id)
           AND (_dead_letters.msg_type IS NULL OR d.ev_type = _dead_letters.msg_type)
           AND (_dead_letters.cutoff IS NULL OR d.failed_at <= _dead_letters.cutoff)
           AND (_dead_letters.past_id IS NULL OR d.dead_id < _dead_letters.past_id)
           AND (_dead_letters.for_msg_id IS NULL OR d.msg_id = _dead_letters.for_msg_id)
           AND (_dead_letters.needle IS NULL
                OR strpos(lower(coalesce(d.ev_type, '')), _dead_letters.needle) > 0
                OR strpos(lower(coalesce(d.reason, '')), _dead_letters.needle) > 0
                OR strpos(lower(d.ev_payload::text), _dead_letters.needle) > 0
                OR strpos(lower(coalesce(d.ev_headers::text, '')), _dead_letters.needle) > 0)
         ORDER BY d.dead_id DESC
         LIMIT _dead_letters.max_rows;
    ELSE
        RETURN QUERY
        SELECT d.dead_id FROM pglogq.dead_letter d
         WHERE d.queue_id = _dead_letters.queue_id
           AND (_dead_letters.sub_id IS NULL OR d.sub_id = _dead_letters.sub_id)
           AND (_dead_letters.msg_type IS NULL OR d.ev_type = _dead_letters.msg_type)
           AND (_dead_letters.cutoff IS NULL OR d.failed_at <= _dead_letters.cutoff)
           AND (_dead_letters.past_id IS NULL OR d.dead_id > _dead_letters.past_id)
           AND (_dead_letters.for_msg_id IS NULL OR d.msg_id = _dead_letters.for_msg_id)
           AND (_dead_letters.needle IS NULL
                OR strpos(lower(coalesce(d.ev_type, '')), _dead_letters.needle) > 0
                OR strpos(lower(coalesce(d.reason, '')), _dead_letters.needle) > 0
                OR strpos(lower(d.ev_payload::text), _dead_letters.needle) > 0
                OR strpos(lower(coalesce(d.ev_headers::text, '')), _dead_letters.needle) > 0)
         ORDER BY d.dead_id
         LIMIT _dead_letters.max_rows;
    END IF;
END $$;
