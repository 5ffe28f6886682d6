-- pglogq.ticker(queue_name): tick every non-paused queue (or one) whose thresholds say so.
-- Parameters: queue_name  one queue, or NULL for all
-- Returns:    the number of ticks written.
-- Raises:     PQ001 unknown queue; PQ014 not in READ COMMITTED; PQ015 txids went backwards.
-- Tables:     tick (insert), event (probe).  Sends NOTIFY "pglogq.<queue>" with the tick id.
-- Thresholds (set_queue_config): a tick is written when committed events wait and either
-- ticker_max_count are waiting or ticker_max_lag has passed since the last tick, or when
-- ticker_idle_period has passed (keep-alive).  A queue another ticker is ticking is skipped.
CREATE OR REPLACE FUNCTION pglogq.ticker(queue_name text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    n integer := 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the ticker must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    IF queue_name IS NOT NULL THEN
        qid := (pglogq._queue(queue_name)).queue_id;
    END IF;
    -- the event table before any queue's rows, as drop_queue takes them: no deadlock with it
    LOCK TABLE ONLY pglogq.event IN ACCESS SHARE MODE;
    FOR qid IN SELECT x.queue_id FROM pglogq.queue x
                WHERE (ticker.queue_name IS NULL AND NOT x.paused) OR x.queue_id = qid
                ORDER BY x.queue_id LOOP
        IF pglogq._tick(qid, false) IS NOT NULL THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END $$;
