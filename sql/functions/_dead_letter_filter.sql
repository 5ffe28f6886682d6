-- pglogq._dead_letter_filter(queue_name, consumer_name, older_than, max_rows): check the
-- dead-letter filters and resolve them (the one owner of their checks).
-- Parameters: queue_name; consumer_name  only this consumer's (NULL: every consumer's);
--             older_than  only those dead-lettered at least this long ago (NULL: any age);
--             max_rows  at most this many (NULL: all)
-- Returns:    one row (queue_id, sub_id, cutoff): the queue; the consumer's sub_id (NULL: every
--             consumer); the latest failed_at selected (NULL: any).  pglogq._dead_letters takes
--             them, with the type and max_rows, and selects.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ019 negative older_than, or
--             max_rows below 1.
-- Tables:     queue, subscription (read).
-- Every dlq_ function assigns this first, in its own body, so the checks run whatever the
-- dead_letter table holds.  They used to sit inside the set-returning selection, which the
-- executor never calls when nothing needs its rows (no dead letter at all: an IN or a join
-- over an empty table): dlq_purge then answered 0 to an unknown queue, an unknown consumer
-- and a negative older_than.
CREATE OR REPLACE FUNCTION pglogq._dead_letter_filter(
    queue_name text, consumer_name text, older_than interval, max_rows bigint,
    OUT queue_id integer, OUT sub_id integer, OUT cutoff timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(_dead_letter_filter.queue_name);
    queue_id := q.queue_id;
    IF _dead_letter_filter.consumer_name IS NOT NULL THEN
        sub_id := (pglogq._consumer(q.queue_id, q.queue_name, _dead_letter_filter.consumer_name)).sub_id;
    END IF;
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'invalid older_than %: must not be negative', older_than USING ERRCODE = 'PQ019';
    END IF;
    IF max_rows < 1 THEN
        RAISE EXCEPTION 'invalid max_rows %: must be at least 1', max_rows USING ERRCODE = 'PQ019';
    END IF;
    cutoff := clock_timestamp() - older_than;
END $$;
