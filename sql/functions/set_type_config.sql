-- pglogq.set_type_config(queue_name, ev_type, param, value): change one setting of one event type
-- of a queue, overriding the queue's setting for events of that type.
-- Parameters: queue_name; ev_type  an event type (1 to 255 bytes; it need not have been sent yet);
--             param  one of the names below; value  its text form, or NULL to remove the override
--             (the type then uses the queue's setting again)
--   max_retries (integer >= 0)          redeliveries before an event of the type is dead-lettered
--                                       (0: its first nack dead-letters it)
--   retry_delay (interval 0 .. 366 days) wait before the first redelivery (the policy's base)
--   retry_factor (number 1 .. 1000)     each further redelivery waits this many times longer (1: fixed)
--   retry_cap (interval 0 .. 366 days)  longest wait, whatever the factor
--   retry_jitter (boolean)              draw each wait from [d/2, d] instead of d
-- Returns:    the new value as text (NULL when the override was removed).
-- Raises:     PQ001 unknown queue; PQ065 unknown parameter, invalid value or invalid type.
-- Tables:     type_config (insert, update or delete one row).
-- The four retry_ settings are the server side of a pglogq.RetryPolicy (base, factor, cap,
-- jitter): they apply when a consumer nacks without retry_after.  A retry_after given to nack
-- (the consumer runtime's retry_policy, or a handler's) wins over them; max_retries always applies.
-- A row whose settings are all NULL is deleted.
CREATE OR REPLACE FUNCTION pglogq.set_type_config(queue_name text, ev_type text, param text, value text)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    kind text;
    result text;
    iv interval;
    nv bigint;
    fv double precision;
BEGIN
    q := pglogq._queue(queue_name);
    IF ev_type IS NULL OR ev_type = '' OR octet_length(ev_type) > 255 THEN
        RAISE EXCEPTION 'invalid event type %: must be 1 to 255 bytes',
            CASE WHEN ev_type IS NULL THEN 'NULL' ELSE quote_literal(left(ev_type, 80)) END
            USING ERRCODE = 'PQ065';
    END IF;
    kind := CASE param
        WHEN 'max_retries' THEN 'integer'
        WHEN 'retry_delay' THEN 'interval'
        WHEN 'retry_cap' THEN 'interval'
        WHEN 'retry_factor' THEN 'double precision'
        WHEN 'retry_jitter' THEN 'boolean'
    END;
    IF kind IS NULL THEN
        RAISE EXCEPTION 'unknown type parameter "%"', left(coalesce(param, 'NULL'), 80)
            USING ERRCODE = 'PQ065',
                  HINT = 'one of max_retries, retry_delay, retry_factor, retry_cap, retry_jitter';
    END IF;
    IF value IS NOT NULL THEN
        BEGIN
            IF kind = 'integer' THEN
                nv := value::bigint;
                IF nv < 0 OR nv > 2147483647 THEN
                    RAISE EXCEPTION 'out of range' USING ERRCODE = '22003';
                END IF;
                result := nv::text;
            ELSIF kind = 'interval' THEN
                iv := value::interval;
                IF iv < interval '0' OR iv > interval '366 days' THEN
                    RAISE EXCEPTION 'out of range' USING ERRCODE = '22003';
                END IF;
                result := iv::text;
            ELSIF kind = 'double precision' THEN
                fv := value::double precision;
                IF NOT (fv >= 1 AND fv <= 1000) THEN  -- also refuses NaN
                    RAISE EXCEPTION 'out of range' USING ERRCODE = '22003';
                END IF;
                result := fv::text;
            ELSE
                result := value::boolean::text;
            END IF;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'invalid value for %: "%" (%)', param, left(value, 80),
                CASE kind WHEN 'integer' THEN 'expected an integer >= 0'
                          WHEN 'interval' THEN 'expected an interval within 0 .. 366 days such as ''30 seconds'''
                          WHEN 'double precision' THEN 'expected a number within 1 .. 1000'
                          ELSE 'expected true or false' END
                USING ERRCODE = 'PQ065';
        END;
    END IF;
    INSERT INTO pglogq.type_config (queue_id, ev_type) VALUES (q.queue_id, set_type_config.ev_type)
    ON CONFLICT DO NOTHING;
    UPDATE pglogq.type_config c
       SET max_retries = CASE WHEN param = 'max_retries' THEN result::integer ELSE c.max_retries END,
           retry_delay = CASE WHEN param = 'retry_delay' THEN result::interval ELSE c.retry_delay END,
           retry_factor = CASE WHEN param = 'retry_factor' THEN result::double precision ELSE c.retry_factor END,
           retry_cap = CASE WHEN param = 'retry_cap' THEN result::interval ELSE c.retry_cap END,
           retry_jitter = CASE WHEN param = 'retry_jitter' THEN result::boolean ELSE c.retry_jitter END
     WHERE c.queue_id = q.queue_id AND c.ev_type = set_type_config.ev_type;
    DELETE FROM pglogq.type_config c
     WHERE c.queue_id = q.queue_id AND c.ev_type = set_type_config.ev_type
       AND c.max_retries IS NULL AND c.retry_delay IS NULL AND c.retry_factor IS NULL
       AND c.retry_cap IS NULL AND c.retry_jitter IS NULL;
    RETURN result;
END $$;
