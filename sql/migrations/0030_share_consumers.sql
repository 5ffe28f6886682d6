-- 0030_share_consumers: share consumers, whose workers take the consumer's batches in leases
-- (see docs/decisions/share-consumers.md): any idle worker takes the next events.
--
-- pglogq.subscriber.share       set by subscribe(..., share => true), never updated: the consumer
--                               row holds the batch being handed out (its page key is the hand-out
--                               frontier) and each worker row holds one lease of it
-- pglogq.sub_state.lease_end_*  a worker's lease: its batch is the consumer's batch, from its page
--                               start up to and including this key (NULL: the whole batch, as for
--                               every holder of an ordinary consumer)
ALTER TABLE pglogq.subscriber ADD COLUMN share boolean NOT NULL DEFAULT false;

ALTER TABLE pglogq.sub_state
    ADD COLUMN lease_end_prio integer,
    ADD COLUMN lease_end_txid xid8,
    ADD COLUMN lease_end_id bigint;

-- the view gets the new columns at its end (without the stale-snapshot check, whose function is
-- installed after the migrations: views.sql puts it back)
CREATE OR REPLACE VIEW pglogq.subscription AS
SELECT s.sub_id, s.queue_id, s.consumer_name, s.parent_id, s.worker_name, s.created_at,
       st.last_tick, st.last_seen, st.heartbeat_at, st.batch_id, st.batch_prev_tick, st.batch_cur_tick,
       st.batch_big, st.batch_started_at, st.page_prio, st.page_txid, st.page_id, st.page_end_prio,
       st.page_end_txid, st.page_end_id, st.page_more, st.skipped_events, st.skipped_at, st.handed_from,
       st.page_marks, st.started_prio, st.started_txid, st.started_id, st.suspect_prio, st.suspect_txid,
       st.suspect_id, st.released_at, s.stream, st.lease_worker, st.hold_txid, st.hold_id, st.hold_until,
       s.share, st.lease_end_prio, st.lease_end_txid, st.lease_end_id
  FROM pglogq.subscriber s
  JOIN pglogq.sub_state st ON st.sub_id = s.sub_id;
