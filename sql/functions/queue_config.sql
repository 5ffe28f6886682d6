-- pglogq.queue_config(queue_name): the settings of a queue (what set_queue_config changes).
-- Parameters: queue_name
-- Returns:    one row: paused, rotation_period, ticker_max_count, ticker_max_lag,
--             ticker_idle_period, batch_max_events, big_batch_events, max_retries, retry_delay,
--             max_payload_bytes, idempotency_window, dead_interval, max_consumer_lag,
--             history_retention, max_result_bytes (meanings: set_queue_config).
-- Raises:     PQ001 unknown queue.
-- Tables:     queue (read).
CREATE OR REPLACE FUNCTION pglogq.queue_config(queue_name text)
RETURNS TABLE (paused boolean, rotation_period interval, ticker_max_count integer,
               ticker_max_lag interval, ticker_idle_period interval, batch_max_events integer,
               big_batch_events integer, max_retries integer, retry_delay interval,
               max_payload_bytes integer, idempotency_window interval, dead_interval interval,
               max_consumer_lag interval, history_retention interval, max_result_bytes integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    RETURN QUERY SELECT q.paused, q.rotation_period, q.ticker_max_count, q.ticker_max_lag,
                        q.ticker_idle_period, q.batch_max_events, q.big_batch_events, q.max_retries,
                        q.retry_delay, q.max_payload_bytes, q.idempotency_window, q.dead_interval,
                        q.max_consumer_lag, q.history_retention, q.max_result_bytes;
END $$;
