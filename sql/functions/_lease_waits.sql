-- pglogq._lease_waits(consumer_id, worker_id, dead_interval): whether a lease (or batch) of
-- another worker of the consumer waits to be taken over.
-- Parameters: consumer_id  the consumer's sub_id; worker_id  the asking worker's row (its own
--             batch does not count); dead_interval  the queue's
-- Returns:    true when a worker row of the consumer holds a batch while silent for longer than
--             dead_interval, or released by maintenance, or made by cede for the events it gave
--             back (released at once): what _take_batch takes over, before anything new.
-- Raises:     nothing.
-- Tables:     subscriber, sub_state (read; nothing locked).
-- _take_batch takes such a batch (its own query locks it, SKIP LOCKED); the short ways to a
-- share worker's lease (receive's, _share_step) ask this first and leave the lease to the
-- general way when one waits, so that a silent worker's events come back while lanes still
-- have events to hand out.
CREATE OR REPLACE FUNCTION pglogq._lease_waits(consumer_id integer, worker_id integer, dead_interval interval)
RETURNS boolean LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    -- PL/pgSQL for its cached plan: as a SQL function (not inlined: it sets search_path) its
    -- query was planned on every call, 0.3 ms
    RETURN EXISTS (SELECT 1 FROM pglogq.subscriber s JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
                    WHERE s.parent_id = consumer_id AND s.stream IS NULL AND st.batch_id IS NOT NULL
                      AND s.sub_id <> worker_id
                      AND (st.heartbeat_at < clock_timestamp() - dead_interval OR st.released_at IS NOT NULL));
END $$;
