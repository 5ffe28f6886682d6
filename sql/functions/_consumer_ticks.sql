-- pglogq._consumer_ticks(queue_id, tops, last_ticks, pos_ticks): the figures consumer_info reads
-- from a queue's ticks, for some of its consumers (the one owner of lag, unread and pending).
-- Parameters: queue_id; tops  the consumers' sub_ids; last_ticks  each one's cursor (the tick it
--             has read up to); pos_ticks  each one's position: the earliest start of its own or
--             its workers' open batches (NULL: none open, the cursor is the position)
-- Returns:    one row per consumer (top): lag (age of its oldest pending event: the time of the
--             first tick after its position that closed events; 0 when nothing is pending),
--             unread (ticked events after its cursor), pending (ticked events after its
--             position: the unread ones and those of its open batches).
-- Tables:     tick (read: four index probes per consumer).
-- Each queue has a copy of this function (_queue_functions) that reads its own tick table with
-- a cached generic plan: a listing of 1,000 queues whose consumers are behind planned these
-- probes for every queue on every call (2 ms a queue); through the copies a session plans them
-- once per queue.  This shared body, planned on every call for the queue's id (so that it reads
-- and locks that queue's tick partitions only), answers for a queue without copies yet.
CREATE OR REPLACE FUNCTION pglogq._consumer_ticks(queue_id integer, tops integer[], last_ticks bigint[],
                                                  pos_ticks bigint[])
RETURNS TABLE (top integer, lag interval, unread bigint, pending bigint) LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_custom_plan AS $$
BEGIN
    -- LATERAL ... LIMIT 1: index probes whatever the statistics
    RETURN QUERY
    SELECT s.top,
           CASE WHEN lt.total > pos.total THEN clock_timestamp() - nxt.tick_time ELSE interval '0' END,
           greatest(lt.total - cur.total, 0),
           greatest(lt.total - pos.total, 0)
      FROM unnest(tops, last_ticks, pos_ticks) s(top, last_tick, pos_tick)
      LEFT JOIN LATERAL (SELECT t.tick_event_total AS total FROM pglogq.tick t
                          WHERE t.queue_id = _consumer_ticks.queue_id
                          ORDER BY t.tick_id DESC LIMIT 1) lt ON true
      LEFT JOIN LATERAL (SELECT t.tick_event_total AS total FROM pglogq.tick t
                          WHERE t.queue_id = _consumer_ticks.queue_id AND t.tick_id = s.last_tick LIMIT 1) cur ON true
      LEFT JOIN LATERAL (SELECT t.tick_id, t.tick_event_total AS total FROM pglogq.tick t
                          WHERE t.queue_id = _consumer_ticks.queue_id
                            AND t.tick_id = coalesce(s.pos_tick, s.last_tick) LIMIT 1) pos ON true
      -- the first tick after the position that closes an event (empty ticks hold none); read
      -- only when something is pending, so an idle consumer scans no run of empty ticks
      LEFT JOIN LATERAL (SELECT t.tick_time FROM pglogq.tick t
                          WHERE t.queue_id = _consumer_ticks.queue_id AND lt.total > pos.total
                            AND t.tick_id > pos.tick_id AND t.tick_event_total > pos.total
                          ORDER BY t.tick_id LIMIT 1) nxt ON true;
END $$;
