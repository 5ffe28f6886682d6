-- pglogq.dlq_search(queue_name, consumer_name, msg_type, older_than, search, for_msg_id, before_dead_id, max_rows, preview_chars): one page of dead letters, newest first.
-- The payload and headers come as pretty JSON text cut to a preview (what a browser page shows).
-- Parameters: queue_name; consumer_name, msg_type, older_than  the dead-letter filters, meaning
--             what they mean in every dlq_ function (NULL: no filter); search  only those whose
--             type, reason, payload or headers text contains this text, ignoring case (NULL or
--             '': no filter; at most 200 characters); for_msg_id  only the dead letters of this
--             message id (NULL: any); before_dead_id  only dead_id below this (the next page:
--             pass the last dead_id of the previous one; NULL: from the newest); max_rows
--             1..1000 (default 50); preview_chars  cut payload_text and headers_text to this
--             many characters, 1..1000000 (default 2000; NULL: whole)
-- Returns:    rows (dead_id, queue, consumer, msg_id, type, payload_text, payload_chars,
--             headers_text, headers_chars, retry_count, reason, created_at, first_failed_at,
--             failed_at), newest dead letter first; payload_text is jsonb_pretty(payload) cut
--             to preview_chars, payload_chars its whole length (the same for headers; NULL
--             headers give NULL text and 0).
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than, max_rows,
--             preview_chars or the length of search out of range.
-- Tables:     dead_letter, subscription, queue (read).
-- The filters are checked by pglogq._dead_letter_filter and select through pglogq._dead_letters
-- (as in dlq_count, dlq_replay_all and dlq_purge), with the page's cursor, order and LIMIT, so a
-- page reads its own rows off the index, and each row by its primary key; search and for_msg_id
-- are read-only refinements that no bulk action takes.
CREATE OR REPLACE FUNCTION pglogq.dlq_search(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL,
    older_than interval DEFAULT NULL, search text DEFAULT NULL, for_msg_id bigint DEFAULT NULL,
    before_dead_id bigint DEFAULT NULL, max_rows integer DEFAULT 50, preview_chars integer DEFAULT 2000)
RETURNS TABLE (dead_id bigint, queue text, consumer text, msg_id bigint, type text, payload_text text,
               payload_chars integer, headers_text text, headers_chars integer, retry_count integer,
               reason text, created_at timestamptz, first_failed_at timestamptz, failed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    needle text := lower(nullif(search, ''));
    f record;
BEGIN
    IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
        RAISE EXCEPTION 'invalid max_rows %: use 1..1000', coalesce(max_rows::text, 'NULL')
            USING ERRCODE = 'PQ019';
    END IF;
    IF preview_chars < 1 OR preview_chars > 1000000 THEN
        RAISE EXCEPTION 'invalid preview_chars %: use 1..1000000 (NULL: whole)', preview_chars
            USING ERRCODE = 'PQ019';
    END IF;
    IF length(search) > 200 THEN
        RAISE EXCEPTION 'invalid search text: % characters, at most 200', length(search)
            USING ERRCODE = 'PQ019';
    END IF;
    f := pglogq._dead_letter_filter(queue_name, consumer_name, older_than, NULL);
    RETURN QUERY
    WITH page AS MATERIALIZED (
        SELECT l.id FROM pglogq._dead_letters(f.queue_id, f.sub_id, msg_type, f.cutoff, max_rows, before_dead_id,
                                              true, for_msg_id, needle) l(id))
    SELECT d.dead_id, q.queue_name, s.consumer_name, d.msg_id, d.ev_type,
           CASE WHEN preview_chars IS NULL THEN p.pretty ELSE left(p.pretty, preview_chars) END,
           length(p.pretty),
           CASE WHEN preview_chars IS NULL THEN p.hpretty ELSE left(p.hpretty, preview_chars) END,
           coalesce(length(p.hpretty), 0),
           d.retry_count, d.reason, d.ev_time, d.first_failed_at, d.failed_at
      FROM page
      -- LATERAL ... LIMIT 1: a probe of the primary key per row of the page whatever the
      -- statistics (a join was planned for the function's estimate of 100 rows: with 10,000 dead
      -- letters a hash join over a scan of all of them, 1.6 ms for a page of 10)
      CROSS JOIN LATERAL (SELECT x.* FROM pglogq.dead_letter x WHERE x.dead_id = page.id LIMIT 1) d
      JOIN pglogq.subscription s ON s.sub_id = d.sub_id
      JOIN pglogq.queue q ON q.queue_id = d.queue_id
      CROSS JOIN LATERAL (SELECT jsonb_pretty(d.ev_payload) AS pretty, jsonb_pretty(d.ev_headers) AS hpretty) p
     ORDER BY d.dead_id DESC;
END $$;
