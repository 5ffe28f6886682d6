-- pglogq._retry_rule(q, ev_type, retry_count): how many redeliveries an event of this type gets,
-- and how long its next retry waits when the consumer names no retry_after (the one owner of
-- that rule: the type's override in pglogq.type_config, else the queue's setting).
-- Parameters: q  the queue row; ev_type  the event's type (NULL: no type, the queue's settings);
--             retry_count  how many times the event has been redelivered already (0 on its first
--             failure)
-- Returns:    one row (max_retries, delay): the event is dead-lettered by a nack once
--             retry_count >= max_retries; otherwise it comes back after delay =
--             retry_delay * retry_factor ^ retry_count, at most retry_cap (at most 366 days),
--             drawn uniformly from [delay / 2, delay] when retry_jitter.  A type without an
--             override of a setting uses the queue's (retry_factor 1, no cap, no jitter).
-- Raises:     nothing.
-- Tables:     type_config (read).
CREATE OR REPLACE FUNCTION pglogq._retry_rule(q pglogq.queue, ev_type text, retry_count integer)
RETURNS TABLE (max_retries integer, delay interval) LANGUAGE plpgsql VOLATILE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    t pglogq.type_config;
    base double precision;
    cap double precision;
    secs double precision;
BEGIN
    IF ev_type IS NOT NULL THEN
        SELECT * INTO t FROM pglogq.type_config c WHERE c.queue_id = q.queue_id AND c.ev_type = _retry_rule.ev_type;
    END IF;
    max_retries := coalesce(t.max_retries, q.max_retries);
    base := extract(epoch FROM coalesce(t.retry_delay, q.retry_delay));
    cap := least(extract(epoch FROM coalesce(t.retry_cap, interval '366 days')), 366 * 86400.0);
    IF coalesce(t.retry_factor, 1) = 1 OR base = 0 THEN
        secs := base;
    ELSIF greatest(retry_count, 0) * ln(t.retry_factor) >= ln(cap / base) THEN
        secs := cap;
    ELSE
        secs := base * power(t.retry_factor, greatest(retry_count, 0));
    END IF;
    secs := least(secs, cap);
    IF coalesce(t.retry_jitter, false) THEN
        secs := secs / 2 + random() * secs / 2;
    END IF;
    delay := make_interval(secs => secs);
    RETURN NEXT;
END $$;
