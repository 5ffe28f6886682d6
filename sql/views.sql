-- views.sql: read-only views for monitoring.  Re-applied on every install and upgrade (after the
-- functions, before the grants), so each view is CREATE OR REPLACE; a view whose columns change
-- must be dropped first here.  Grants are in roles.sql (applied after this file).

-- pglogq.in_flight: one row per event being handled right now that its worker has reported
-- (the consumer runtime reports every event running longer than one heartbeat interval, and
-- every call of msg.progress()).  Rows disappear when the batch is acknowledged or taken over.
--   queue_name, consumer_name; worker  the worker's label (host:pid:name) or worker name;
--   batch_id, msg_id; started_at; last_heartbeat  the later of the event's progress report and
--   the holder's heartbeat; running_for; silent_for  time since last_heartbeat; percent; stage;
--   counters.
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
       p.counters
  FROM pglogq.progress p
  JOIN pglogq.subscription s ON s.sub_id = p.sub_id AND s.batch_id = p.batch_id
  JOIN pglogq.queue q ON q.queue_id = s.queue_id;
