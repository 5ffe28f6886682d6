-- pglogq.dlq_count(queue_name, consumer_name, msg_type, older_than): how many dead letters a
-- filter matches (what dlq_replay_all or dlq_purge with the same filters would touch now).
-- Parameters: queue_name; consumer_name  only this consumer's (NULL: every consumer's);
--             msg_type  only events of this type (NULL: any); older_than  only those
--             dead-lettered at least this long ago (NULL: any age)
-- Returns:    the number of matching dead letters.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than.
-- Tables:     dead_letter_count (read; without type and older_than), dead_letter (read).
CREATE OR REPLACE FUNCTION pglogq.dlq_count(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL,
    older_than interval DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    f record;
BEGIN
    f := pglogq._dead_letter_filter(queue_name, consumer_name, older_than, NULL);
    IF msg_type IS NULL AND older_than IS NULL THEN
        -- every dead letter of the queue or consumer: the count the triggers of dead_letter keep
        RETURN coalesce((SELECT sum(c.dead_letters) FROM pglogq.dead_letter_count c
                          WHERE c.queue_id = f.queue_id AND (f.sub_id IS NULL OR c.sub_id = f.sub_id)), 0);
    END IF;
    RETURN (SELECT count(*) FROM pglogq._dead_letters(f.queue_id, f.sub_id, msg_type, f.cutoff, NULL));
END $$;
