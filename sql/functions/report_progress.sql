-- pglogq.report_progress(batch_id, msg_id, percent, stage, counters, worker, started_at): progress
-- of one event being handled now; also a heartbeat of its batch.
-- Parameters: batch_id, msg_id  an event of the page receive returned last;
--             percent  0..100 or NULL (keep the last value); stage  up to 200 characters or NULL
--             (keep); counters  a JSON object of at most 4096 bytes or NULL (keep);
--             worker  a label shown in pglogq.in_flight (default: the worker name given to
--             receive, also on a partitioned queue);
--             started_at  when handling began (default: the first report; never in the future)
-- Returns:    true; false when the batch is no longer its holder's (acknowledged, or taken over):
--             stop handling it.
-- Raises:     PQ008 unknown batch id (NULL, below 1, or never issued); PQ010 msg_id is not in the page of the batch;
--             PQ025 invalid percent, stage, counters or worker.
-- Tables:     progress (insert or update one row; its retry_count, the event's, on the first
--             report: the delivery count pglogq.in_flight shows), sub_state (heartbeat), event
--             (read, on the first report of an event only), queue (read: its urgent lane).
-- One row per running event; ack deletes the rows of its batch and a takeover those of the
-- silent worker, so the table holds at most the events in flight.  Read it through the view
-- pglogq.in_flight.
-- Plans: custom (plan_cache_mode): a generic plan of its reads of the partitioned tick and event
-- tables locks every queue's partitions (see pglogq.queue_info).
CREATE OR REPLACE FUNCTION pglogq.report_progress(
    batch_id bigint, msg_id bigint, percent numeric DEFAULT NULL, stage text DEFAULT NULL,
    counters jsonb DEFAULT NULL, worker text DEFAULT NULL, started_at timestamptz DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    h pglogq.subscription;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    now_ts timestamptz := clock_timestamp();
    tries integer;  -- the event's failed deliveries its copy carries (the delivery count's base)
BEGIN
    IF percent IS NOT NULL AND (percent < 0 OR percent > 100 OR percent = 'NaN'::numeric) THEN
        RAISE EXCEPTION 'invalid percent %: use 0..100', percent USING ERRCODE = 'PQ025';
    END IF;
    IF stage IS NOT NULL AND length(stage) > 200 THEN
        RAISE EXCEPTION 'invalid stage: % characters, at most 200', length(stage) USING ERRCODE = 'PQ025';
    END IF;
    IF counters IS NOT NULL AND (jsonb_typeof(counters) <> 'object' OR octet_length(counters::text) > 4096) THEN
        RAISE EXCEPTION 'invalid counters: a JSON object of at most 4096 bytes is expected (got % of % bytes)',
            jsonb_typeof(counters), octet_length(counters::text) USING ERRCODE = 'PQ025';
    END IF;
    IF worker IS NOT NULL AND (length(worker) > 200 OR worker = '') THEN
        RAISE EXCEPTION 'invalid worker label: 1 to 200 characters' USING ERRCODE = 'PQ025';
    END IF;
    IF msg_id IS NULL THEN
        RAISE EXCEPTION 'message NULL is not in the page of batch %', batch_id USING ERRCODE = 'PQ010';
    END IF;
    h := pglogq._holder(batch_id, false);
    IF h.sub_id IS NULL THEN
        RETURN false;
    END IF;
    UPDATE pglogq.progress p
       SET percent = coalesce(report_progress.percent, p.percent),
           stage = coalesce(report_progress.stage, p.stage),
           counters = coalesce(report_progress.counters, p.counters),
           worker = coalesce(report_progress.worker, p.worker),
           heartbeat_at = now_ts
     WHERE p.sub_id = h.sub_id AND p.msg_id = report_progress.msg_id
       AND p.batch_id = report_progress.batch_id;
    IF NOT FOUND THEN
        -- first report of this event: it must be in the page receive returned last
        SELECT t.tick_snapshot INTO prev_snap FROM pglogq.tick t
         WHERE t.queue_id = h.queue_id AND t.tick_id = h.batch_prev_tick;
        SELECT t.tick_snapshot INTO cur_snap FROM pglogq.tick t
         WHERE t.queue_id = h.queue_id AND t.tick_id = h.batch_cur_tick;
        IF h.page_end_txid IS NOT NULL THEN
            SELECT x.ev_retry INTO tries FROM pglogq.event x
             WHERE x.ev_queue = h.queue_id AND x.ev_id = report_progress.msg_id
               AND x.ev_txid >= pg_snapshot_xmin(prev_snap) AND x.ev_txid < pg_snapshot_xmax(cur_snap)
               AND pg_visible_in_snapshot(x.ev_txid, cur_snap) AND NOT pg_visible_in_snapshot(x.ev_txid, prev_snap)
               AND (x.ev_owner IS NULL OR x.ev_owner = coalesce(h.parent_id, h.sub_id))
               -- the holder's stream only (as in nack): a partition's, the urgent lane's, or the rest
               AND CASE WHEN coalesce(h.stream, h.lease_stream) IS NULL
                        THEN x.ev_priority <= 100
                             OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id)
                        WHEN coalesce(h.stream, h.lease_stream) = -1 THEN x.ev_priority > 100
                        WHEN coalesce(h.stream, h.lease_stream) <= -2 THEN x.ev_id % 8 = -2 - coalesce(h.stream, h.lease_stream)
                                                 AND (x.ev_priority <= 100
                                                      OR NOT (SELECT q.urgent_lane FROM pglogq.queue q WHERE q.queue_id = h.queue_id))
                        ELSE x.ev_partition = coalesce(h.stream, h.lease_stream) END
               AND pglogq._page_position(h, x.ev_priority, x.ev_txid, x.ev_id) = 0
             LIMIT 1;
        END IF;
        IF NOT FOUND OR h.page_end_txid IS NULL THEN
            RAISE EXCEPTION 'message % is not in the page of batch % that receive returned', msg_id, batch_id
                USING ERRCODE = 'PQ010';
        END IF;
        INSERT INTO pglogq.progress AS p (sub_id, batch_id, msg_id, worker, started_at, heartbeat_at,
                                          percent, stage, counters, retry_count)
        VALUES (h.sub_id, report_progress.batch_id, report_progress.msg_id,
                coalesce(report_progress.worker, pglogq._worker_name(h)),
                least(coalesce(report_progress.started_at, now_ts), now_ts), now_ts,
                report_progress.percent, report_progress.stage, report_progress.counters, tries)
        ON CONFLICT ON CONSTRAINT progress_pkey DO UPDATE
           SET batch_id = EXCLUDED.batch_id, worker = EXCLUDED.worker, started_at = EXCLUDED.started_at,
               heartbeat_at = EXCLUDED.heartbeat_at, percent = EXCLUDED.percent, stage = EXCLUDED.stage,
               counters = EXCLUDED.counters, retry_count = EXCLUDED.retry_count;
    END IF;
    UPDATE pglogq.sub_state s SET heartbeat_at = now_ts, last_seen = now_ts, released_at = NULL
     WHERE s.sub_id = h.sub_id;
    RETURN true;
END $$;
