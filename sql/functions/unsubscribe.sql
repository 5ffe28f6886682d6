-- pglogq.unsubscribe(queue_name, consumer_name): remove a consumer, its workers, retries and dead letters.
-- Parameters: queue_name; consumer_name
-- Returns:    true if removed, false if it was not subscribed.
-- Raises:     PQ001 unknown queue; PQ004 invalid name.
-- Tables:     subscriber (delete, cascades to sub_state, retry, dead_letter, progress, handed_run).
-- Locks: the consumer's advisory lock exclusively: it waits for open transactions that called a
-- function of this consumer, and calls racing it wait and then get PQ002.
CREATE OR REPLACE FUNCTION pglogq.unsubscribe(queue_name text, consumer_name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    PERFORM pglogq._check_name(consumer_name, 'consumer', 63);
    q := pglogq._queue(queue_name);
    -- calls of this consumer (they hold this lock shared) finish first; later ones then get PQ002
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.consumer.' || q.queue_id), hashtext(unsubscribe.consumer_name));
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    DELETE FROM pglogq.subscriber s
     WHERE s.queue_id = q.queue_id AND s.consumer_name = unsubscribe.consumer_name;
    RETURN FOUND;
END $$;
