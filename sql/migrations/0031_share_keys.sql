-- 0031_share_keys: share consumers on queues with an urgent lane, and their in-flight window
-- (see docs/decisions/share-consumers.md).
--
-- pglogq.sub_state.lease_stream  a worker's lease cut from the urgent lane's batch (-1: its events
--                                are read as the lane's stream reads them); NULL: from the
--                                consumer's batch
-- pglogq.sub_state.lease_seq     the number of the lease's first event in its consumer's count of
--                                events handed out (share_handed when the lease was cut)
-- pglogq.sub_state.share_handed  a share consumer's row: events handed out in leases so far
-- pglogq.sub_state.share_window  a share consumer's row: the most events handed out from the
--                                first event of its oldest open lease on (leased, or done but
--                                behind that lease); NULL: no limit (set_share_window)
ALTER TABLE pglogq.sub_state
    ADD COLUMN lease_stream smallint,
    ADD COLUMN lease_seq bigint,
    ADD COLUMN share_handed bigint,
    ADD COLUMN share_window integer;

-- the view gets the new columns at its end (without the stale-snapshot check, whose function is
-- installed after the migrations: views.sql puts it back)
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
  JOIN pglogq.sub_state st ON st.sub_id = s.sub_id;
