-- pglogq.set_queue_config(queue_name, param, value): change one setting of a queue.
-- Parameters: queue_name; param  one of the names below; value  text form of the new value
--   paused (boolean)                  stop ticking the queue (sends still append)
--   rotation_period (interval > 0)    how often event tables rotate
--   ticker_max_count (integer >= 1)   tick as soon as this many events are waiting
--   ticker_max_lag (interval >= 0)    tick when events have waited this long (0: at once)
--   ticker_idle_period (interval > 0) keep-alive tick when nothing happens
--   batch_max_events (integer >= 1)   merge ticks into one batch up to about this many events
--   big_batch_events (integer >= 1)   above this a batch is streamed in commit order, not priority order
--   max_retries (integer >= 0)        redeliveries before an event is dead-lettered (0: at its first nack)
--   retry_delay (interval >= 0)       default retry_after of nack
--   max_payload_bytes (integer >= 1)  largest accepted event: payload plus headers as stored jsonb (1.2-1.5x the JSON text)
--   idempotency_window (interval > 0) how long an idempotency key is remembered
--   dead_interval (interval > 0)      silence after which a worker's batch is taken over
--   max_consumer_lag (interval >= 0)  retention limit: consumers further behind are moved forward (0: off)
--   partitions (integer 1..1024)      events of one key in one partition, each consumer reads every
--                                     partition as a stream of its own (see send_batch_keyed); while
--                                     the queue is new, or once nothing is in flight: _set_layout
--   history_retention (interval >= 0) how long the outcome log keeps a finished handler run (0: off)
--   max_result_bytes (integer >= 1)   largest result stored with an outcome (stored jsonb size)
--   urgent_lane (boolean)             events above priority 100 jump a waiting backlog (one partition
--                                     only); while the queue is new or nothing is in flight
-- Returns:    the new value as text.
-- Raises:     PQ001 unknown queue; PQ005 unknown parameter or invalid value; PQ075 invalid partition
--             count; PQ077 invalid urgent lane, or a layout set while events are in flight (see
--             _set_layout).
-- Tables:     queue (update); a layout change: see _set_layout.
CREATE OR REPLACE FUNCTION pglogq.set_queue_config(queue_name text, param text, value text)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    kind text;
    iv interval;
    nv bigint;
    bv boolean;
    result text;
BEGIN
    q := pglogq._queue(queue_name);
    IF param IN ('partitions', 'urgent_lane') THEN
        IF value IS NULL THEN
            RAISE EXCEPTION 'invalid value for %: NULL', param
                USING ERRCODE = CASE param WHEN 'partitions' THEN 'PQ075' ELSE 'PQ077' END;
        END IF;
        RETURN pglogq._set_layout(q, param, value);
    END IF;
    kind := CASE param
        WHEN 'paused' THEN 'bool'
        WHEN 'rotation_period' THEN 'interval+'
        WHEN 'ticker_max_lag' THEN 'interval'
        WHEN 'ticker_idle_period' THEN 'interval+'
        WHEN 'retry_delay' THEN 'interval'
        WHEN 'idempotency_window' THEN 'interval+'
        WHEN 'dead_interval' THEN 'interval+'
        WHEN 'max_consumer_lag' THEN 'interval'
        WHEN 'ticker_max_count' THEN 'int'
        WHEN 'batch_max_events' THEN 'int'
        WHEN 'big_batch_events' THEN 'int'
        WHEN 'max_retries' THEN 'int0'
        WHEN 'max_payload_bytes' THEN 'int'
        WHEN 'history_retention' THEN 'interval'
        WHEN 'max_result_bytes' THEN 'int'
    END;
    IF kind IS NULL THEN
        RAISE EXCEPTION 'unknown queue parameter "%"', left(coalesce(param, 'NULL'), 80)
            USING ERRCODE = 'PQ005',
                  HINT = 'one of paused, rotation_period, ticker_max_count, ticker_max_lag, ticker_idle_period, '
                         'batch_max_events, big_batch_events, max_retries, retry_delay, max_payload_bytes, '
                         'idempotency_window, dead_interval, max_consumer_lag, history_retention, max_result_bytes, '
                         'partitions, urgent_lane';
    END IF;
    IF value IS NULL THEN
        RAISE EXCEPTION 'invalid value for %: NULL', param USING ERRCODE = 'PQ005';
    END IF;
    BEGIN
        IF kind = 'bool' THEN
            bv := value::boolean;
            result := bv::text;
        ELSIF kind LIKE 'interval%' THEN
            iv := value::interval;
            IF iv < interval '0' OR (kind = 'interval+' AND iv = interval '0') OR iv > interval '100 years' THEN
                RAISE EXCEPTION 'out of range' USING ERRCODE = '22003';
            END IF;
            result := iv::text;
        ELSE
            nv := value::bigint;
            IF nv < (kind = 'int')::integer OR nv > 2147483647 THEN
                RAISE EXCEPTION 'out of range' USING ERRCODE = '22003';
            END IF;
            result := nv::text;
        END IF;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'invalid value for %: "%" (%)', param, left(value, 80),
            CASE kind WHEN 'bool' THEN 'expected true or false'
                      WHEN 'interval+' THEN 'expected a positive interval such as ''5 seconds'''
                      WHEN 'interval' THEN 'expected an interval >= 0 such as ''100 ms'''
                      WHEN 'int0' THEN 'expected an integer >= 0'
                      ELSE 'expected an integer >= 1' END
            USING ERRCODE = 'PQ005';
    END;
    EXECUTE format('UPDATE pglogq.queue SET %I = $1::%s WHERE queue_id = $2', param,
                   CASE kind WHEN 'bool' THEN 'boolean' WHEN 'int' THEN 'integer' WHEN 'int0' THEN 'integer' ELSE 'interval' END)
      USING result, q.queue_id;
    -- a resumed queue, or new thresholds, may have ticks due at once: a sleeping ticker wakes
    PERFORM pglogq._wake_ticker();
    RETURN result;
END $$;
