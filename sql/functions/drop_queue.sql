-- pglogq.drop_queue(queue_name, force): drop a queue, its events and everything about it.
-- Parameters: queue_name; force  drop even if consumers are subscribed or events are stored
-- Returns:    true if dropped, false if there was no such queue.
-- Raises:     PQ004 invalid name; PQ013 queue still has consumers (without force).
-- Tables:     queue and everything referencing it (cascade), event partitions (dropped).
CREATE OR REPLACE FUNCTION pglogq.drop_queue(queue_name text, force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    nsub integer;
BEGIN
    PERFORM pglogq._check_name(queue_name, 'queue', 48);
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_name = drop_queue.queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT count(*) INTO nsub FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL;
    IF nsub > 0 AND NOT coalesce(force, false) THEN
        RAISE EXCEPTION 'queue "%" still has % consumer(s)', q.queue_name, nsub
            USING ERRCODE = 'PQ013', HINT = 'unsubscribe them first, or pass force => true';
    END IF;
    EXECUTE format('DROP TABLE pglogq.%I', 'event_' || q.queue_id);
    EXECUTE format('DROP SEQUENCE pglogq.%I', 'event_' || q.queue_id || '_seq');
    DELETE FROM pglogq.queue WHERE queue_id = q.queue_id;
    RETURN true;
END $$;
