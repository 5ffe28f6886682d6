-- 0019_partitions: partitions inside a queue: keyed events, and one stream per
-- partition for every consumer, so that cooperating workers share a queue key by key.
--
-- pglogq.queue.partitions  N (1: today's single ordered log, unchanged).  Set while the queue is
--                          new (set_queue_config, see _set_layout).
-- pglogq.event.ev_key      the key given to send_keyed / send_batch_keyed (NULL without one)
-- pglogq.event.ev_partition 0..N-1 on a queue of N > 1 partitions (pglogq.key_partition), NULL
--                          on a queue of one: every event of one key is in one partition
-- pglogq.subscriber.stream  0..N-1: the stream of one partition of a consumer (parent_id), made
--                          by subscribe; NULL for a consumer and a cooperating worker
-- pglogq.sub_state          lease_worker  the worker that holds the stream's page (or held the
--                          last one); hold_txid, hold_id  the first event of the page nacked
--                          (strict order: the page is acknowledged up to it, it comes again);
--                          hold_until  the stream is not handed out again before this time
-- A partitioned queue's event table gets an (ev_partition, ev_txid, ev_id) index when its
-- partitions are set: no other queue pays for it (not even in planning).
ALTER TABLE pglogq.queue ADD COLUMN partitions integer NOT NULL DEFAULT 1;
ALTER TABLE pglogq.queue ADD CONSTRAINT queue_partitions_ok CHECK (partitions BETWEEN 1 AND 1024);

ALTER TABLE pglogq.event ADD COLUMN ev_key text, ADD COLUMN ev_partition smallint;

-- a delayed send, a retry and a dead letter keep the key: the event goes back into its partition
ALTER TABLE pglogq.delayed ADD COLUMN ev_key text;
ALTER TABLE pglogq.retry ADD COLUMN ev_key text;
ALTER TABLE pglogq.dead_letter ADD COLUMN ev_key text;

ALTER TABLE pglogq.subscriber ADD COLUMN stream smallint;
CREATE UNIQUE INDEX subscriber_stream_uq ON pglogq.subscriber (parent_id, stream) WHERE stream IS NOT NULL;

ALTER TABLE pglogq.sub_state
    ADD COLUMN lease_worker text,
    ADD COLUMN hold_txid xid8,
    ADD COLUMN hold_id bigint,
    ADD COLUMN hold_until timestamptz;

-- the view gets the new columns at its end (without the stale-snapshot check, whose function is
-- installed after the migrations: views.sql puts it back)
CREATE OR REPLACE VIEW pglogq.subscription AS
SELECT s.sub_id, s.queue_id, s.consumer_name, s.parent_id, s.worker_name, s.created_at,
       st.last_tick, st.last_seen, st.heartbeat_at, st.batch_id, st.batch_prev_tick, st.batch_cur_tick,
       st.batch_big, st.batch_started_at, st.page_prio, st.page_txid, st.page_id, st.page_end_prio,
       st.page_end_txid, st.page_end_id, st.page_more, st.skipped_events, st.skipped_at, st.handed_from,
       st.page_marks, st.started_prio, st.started_txid, st.started_id, st.suspect_prio, st.suspect_txid,
       st.suspect_id, st.released_at, s.stream, st.lease_worker, st.hold_txid, st.hold_id, st.hold_until
  FROM pglogq.subscriber s
  JOIN pglogq.sub_state st ON st.sub_id = s.sub_id;
