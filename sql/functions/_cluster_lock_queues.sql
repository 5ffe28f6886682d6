-- pglogq._cluster_lock_queues(): wait for every transaction sending to a sharded queue, and hold
-- off new ones until the caller's transaction ends (before this shard gives slots away).
-- Parameters: none.
-- Returns:    the number of queues locked.
-- Raises:     40P01 when a sending transaction waits for a lock this call holds (it sent to one
--             queue and now sends to another): one of the two is rolled back, to be retried.
-- Tables:     queue (read).
-- Locks: each sharded queue's name lock exclusively, by name (the lock every send takes shared,
-- see _queue), then the registry lock (create_queue's: a queue being created is committed when
-- it is granted) and the name locks of the queues created meanwhile; all held until the caller's
-- transaction ends.  A transaction that sent to a queue holds its name lock until it ends, so
-- every such transaction has committed (or rolled back) when this returns.  Name locks before
-- the registry lock, the order of create_queue and drop_queue: no deadlock with them.
CREATE OR REPLACE FUNCTION pglogq._cluster_lock_queues()
RETURNS integer LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qn text;
    done text[] := '{}';
BEGIN
    FOR qn IN SELECT q.queue_name FROM pglogq.queue q WHERE q.sharded ORDER BY q.queue_name COLLATE "C" LOOP
        PERFORM pg_advisory_xact_lock(hashtext('pglogq.queue'), hashtext(qn));
        done := done || qn;
    END LOOP;
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    FOR qn IN SELECT q.queue_name FROM pglogq.queue q WHERE q.sharded AND NOT q.queue_name = ANY (done)
               ORDER BY q.queue_name COLLATE "C" LOOP
        PERFORM pg_advisory_xact_lock(hashtext('pglogq.queue'), hashtext(qn));
        done := done || qn;
    END LOOP;
    RETURN cardinality(done);
END $$;
