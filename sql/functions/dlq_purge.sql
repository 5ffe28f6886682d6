-- pglogq.dlq_purge(queue_name, consumer_name, msg_type, older_than): delete dead letters for good.
-- Parameters: queue_name; consumer_name  only this consumer's (NULL: every consumer's);
--             msg_type  only events of this type (NULL: any); older_than  only those
--             dead-lettered at least this long ago (NULL: any age)
-- Returns:    the number of dead letters deleted.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than.
-- Tables:     dead_letter (delete).
-- The filters come in the same order in every dlq_ function and mean the same
-- (pglogq._dead_letter_filter checks them, pglogq._dead_letters selects); older_than used to
-- come second (docs/changelog.md).
CREATE OR REPLACE FUNCTION pglogq.dlq_purge(
    queue_name text, consumer_name text DEFAULT NULL, msg_type text DEFAULT NULL,
    older_than interval DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    f record;
    n integer;
BEGIN
    f := pglogq._dead_letter_filter(queue_name, consumer_name, older_than, NULL);
    -- an array of the ids: each is deleted through the primary key (a join with the set could
    -- be planned as a scan of the whole table)
    DELETE FROM pglogq.dead_letter x
     WHERE x.dead_id = ANY (ARRAY(SELECT d.id FROM pglogq._dead_letters(f.queue_id, f.sub_id, msg_type,
                                                                        f.cutoff, NULL) d(id)));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
