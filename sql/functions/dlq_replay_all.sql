-- pglogq.dlq_replay_all(queue_name, consumer_name, msg_type, older_than, max_rows): replay many
-- dead letters.
-- Parameters: queue_name; consumer_name  only this consumer's (NULL: every consumer's);
--             msg_type  only events of this type (NULL: any); older_than  only those
--             dead-lettered at least this long ago (NULL: any age); max_rows  at most this
--             many, oldest first (NULL: all; at least 1)
-- Returns:    the number of dead letters replayed.  Each goes back to the consumer that
--             dead-lettered it only, as dlq_replay does (same msg_id, retry_count 0).
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than, or
--             max_rows below 1.
-- Tables:     dead_letter (delete), event (insert), queue (read).
-- One set-based statement (pglogq._replay).  Concurrent calls (and dlq_replay) replay each dead letter once: one
-- replayed meanwhile is skipped, so a call with max_rows may replay fewer than max_rows while
-- more match.
CREATE OR REPLACE FUNCTION pglogq.dlq_replay_all(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL,
    older_than interval DEFAULT NULL, max_rows integer DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    f record;
    n bigint;
BEGIN
    f := pglogq._dead_letter_filter(queue_name, consumer_name, older_than, max_rows);
    SELECT count(*) INTO n
      FROM pglogq._replay(ARRAY(SELECT d.id FROM pglogq._dead_letters(f.queue_id, f.sub_id, msg_type,
                                                                       f.cutoff, max_rows) d(id)));
    RETURN n;
END $$;
