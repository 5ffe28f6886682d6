-- views.sql: read-only views for monitoring.  Re-applied on every install and upgrade (after the
-- functions, before the grants), so each view is CREATE OR REPLACE; a view whose columns change
-- must be dropped first here.  Grants are in roles.sql (applied after this file).

-- pglogq.subscription: one row per consumer or worker, its identity (pglogq.subscriber) and its
-- state (pglogq.sub_state), with the columns of the table it replaced (migration 0018).  The
-- functions read it and lock through it; they update pglogq.sub_state.  Outside READ COMMITTED
-- every query on it first checks (pglogq._state_check, once per query) that the transaction's
-- snapshot does not predate a move of the state rows, and fails with 40001 if it does.
-- Replaced only when it is not this version yet: a re-install then takes no lock on it (receive
-- and ack read it all the time; a replace would wait for every open transaction that did).
DO $views$
BEGIN
    IF pg_catalog.pg_get_viewdef('pglogq.subscription'::regclass) !~ '_state_check' THEN
        -- (migrations 0019, 0030 and 0031 leave it without the check, with their new columns)
        EXECUTE $view$
CREATE OR REPLACE VIEW pglogq.subscription AS
SELECT s.sub_id, s.queue_id, s.consumer_name, s.parent_id, s.worker_name, s.created_at,
       st.last_tick, st.last_seen, st.heartbeat_at, st.batch_id, st.batch_prev_tick, st.batch_cur_tick,
       st.batch_big, st.batch_started_at, st.page_prio, st.page_txid, st.page_id, st.page_end_prio,
       st.page_end_txid, st.page_end_id, st.page_more, st.skipped_events, st.skipped_at, st.handed_from,
       st.page_marks, st.started_prio, st.started_txid, st.started_id, st.suspect_prio, st.suspect_txid,
       st.suspect_id, st.released_at, s.stream, st.lease_worker, st.hold_txid, st.hold_id, st.hold_until,
       s.share, st.lease_end_prio, st.lease_end_txid, st.lease_end_id, st.lease_stream, st.lease_seq,
       st.share_handed, st.share_window
  FROM pglogq.subscriber s
  JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
 WHERE (pg_catalog.current_setting('transaction_isolation') = 'read committed' OR pglogq._state_check())
$view$;
    END IF;
END
$views$;

-- pglogq.in_flight: one row per event being handled right now that its worker has reported
-- (the consumer runtime reports every event running longer than one heartbeat interval, and
-- every call of msg.progress()).  Rows disappear when the batch is acknowledged or taken over.
--   queue_name, consumer_name; worker  the worker's label (host:pid:name) or worker name;
--   batch_id, msg_id; started_at; last_heartbeat  the later of the event's progress report and
--   the holder's heartbeat; running_for; silent_for  time since last_heartbeat; percent; stage;
--   counters; expires_at  when its holder's batch (a lease, for a share consumer) is taken over
--   unless renewed: last heartbeat + the queue's dead_interval, or when maintenance released it
--   (NULL for a consumer receiving without a worker name: nobody takes its batch over);
--   delivery_count  the hand-out this is: 1 + its failed deliveries so far (nacks, and crashes of
--   earlier hand-outs whose handler had started), the retry_count receive returned + 1 (NULL for
--   a progress row written before schema 0032).
CREATE OR REPLACE VIEW pglogq.in_flight AS
SELECT q.queue_name,
       s.consumer_name,
       coalesce(p.worker, s.worker_name) AS worker,
       p.batch_id,
       p.msg_id,
       p.started_at,
       greatest(p.heartbeat_at, s.heartbeat_at) AS last_heartbeat,
       clock_timestamp() - p.started_at AS running_for,
       clock_timestamp() - greatest(p.heartbeat_at, s.heartbeat_at) AS silent_for,
       p.percent,
       p.stage,
       p.counters,
       CASE WHEN s.parent_id IS NOT NULL THEN least(s.released_at, s.heartbeat_at + q.dead_interval) END AS expires_at,
       p.retry_count + coalesce(a.crashes, 0) + 1 AS delivery_count
  FROM pglogq.progress p
  JOIN pglogq.subscription s ON s.sub_id = p.sub_id AND s.batch_id = p.batch_id
  JOIN pglogq.queue q ON q.queue_id = s.queue_id
  LEFT JOIN pglogq.attempt a ON a.sub_id = p.sub_id AND a.msg_id = p.msg_id;
