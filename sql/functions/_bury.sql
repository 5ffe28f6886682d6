-- pglogq._bury(e, owner, retry_count, reason): move an event to a consumer's dead-letter queue
-- (the one owner of that write).
-- Parameters: e  the event row as stored in the log; owner  the consumer's sub_id;
--             retry_count  failed attempts before the last one (nacks and crashes);
--             reason  why (kept to its last 2000 bytes)
-- Returns:    nothing.
-- Raises:     nothing.
-- Tables:     dead_letter (insert; a second burial of the same event for the consumer is a no-op).
-- Called by nack (the last allowed failure) and _crashed_page (an event whose handler never
-- finished max_retries + 1 times).
CREATE OR REPLACE FUNCTION pglogq._bury(e pglogq.event, owner integer, retry_count integer, reason text)
RETURNS void LANGUAGE sql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    INSERT INTO pglogq.dead_letter (queue_id, sub_id, msg_id, ev_time, ev_type, ev_payload, ev_headers,
                                    ev_priority, retry_count, reason, first_failed_at, ev_key)
    VALUES (e.ev_queue, owner, e.ev_id, e.ev_time, e.ev_type, e.ev_payload, e.ev_headers,
            e.ev_priority, retry_count, right(reason, 2000), coalesce(e.ev_failed_at, clock_timestamp()), e.ev_key)
    ON CONFLICT (sub_id, msg_id) DO NOTHING;
$$;
