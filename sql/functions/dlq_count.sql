-- pglogq.dlq_count(queue_name, consumer_name, msg_type, older_than): how many dead letters a
-- filter matches (what dlq_replay_all or dlq_purge with the same filters would touch now).
-- Parameters: queue_name; consumer_name  only this consumer's (NULL: every consumer's);
--             msg_type  only events of this type (NULL: any); older_than  only those
--             dead-lettered at least this long ago (NULL: any age)
-- Returns:    the number of matching dead letters.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than.
-- Tables:     dead_letter (read).
CREATE OR REPLACE FUNCTION pglogq.dlq_count(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL,
    older_than interval DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    f record;
BEGIN
    f := pglogq._dead_letter_filter(queue_name, consumer_name, older_than, NULL);
    RETURN (SELECT count(*) FROM pglogq._dead_letters(f.queue_id, f.sub_id, msg_type, f.cutoff, NULL));
END $$;
