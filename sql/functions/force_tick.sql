-- pglogq.force_tick(queue_name): write a tick of one queue now, whatever its thresholds.
-- Parameters: queue_name
-- Returns:    the new tick id.
-- Raises:     PQ001 unknown queue; PQ014 not in READ COMMITTED; PQ015 txids went backwards.
-- Tables:     tick (insert).  Waits for a concurrent ticker of the same queue.
CREATE OR REPLACE FUNCTION pglogq.force_tick(queue_name text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the ticker must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    RETURN pglogq._tick((pglogq._queue(queue_name)).queue_id, true);
END $$;
