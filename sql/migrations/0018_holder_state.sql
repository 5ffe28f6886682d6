-- 0018_holder_state: the state written on the hot path moves out of the subscription row into a
-- rotated table, so that it never piles up dead tuples under a long transaction.
--
-- Until 0017 receive, ack, mark_started and heartbeat UPDATEd the subscription row on every page:
-- under a held xmin VACUUM can free none of the old versions, and the row's table grew without
-- bound.  Now:
--   pglogq.subscriber  the identity of a consumer or worker (sub_id, queue, names, parent,
--                      created_at): what retry, dead_letter, progress, attempt and handed_run
--                      reference, never updated (the old table, renamed, its volatile columns
--                      dropped);
--   pglogq.sub_state   everything else (cursor, open batch and page, start frontier, heartbeat,
--                      ...), one row per subscriber, updated in place as before, partitioned by
--                      state_part (0 or 1, the metadata epoch pglogq.meta_epoch modulo 2):
--                      maint_rotate_meta moves every row into the current epoch's partition and
--                      TRUNCATEs the other one, which frees its dead versions whatever
--                      transaction is open;
--   pglogq.subscription a view joining the two, with the old columns in the old order (created
--                      here so that the functions can name its row type; views.sql replaces it
--                      with the version that refuses a stale snapshot).
DROP VIEW IF EXISTS pglogq.in_flight;

CREATE TABLE pglogq.sub_state (
    sub_id              integer NOT NULL REFERENCES pglogq.subscription ON DELETE CASCADE,
    state_part          smallint NOT NULL
        DEFAULT (coalesce(pg_sequence_last_value('pglogq.meta_epoch'::regclass), 0) % 2)::smallint,
    last_tick           bigint,                 -- consumers only: next batch starts after it
    last_seen           timestamptz,
    heartbeat_at        timestamptz,
    batch_id            bigint,
    batch_prev_tick     bigint,
    batch_cur_tick      bigint,
    batch_big           boolean,
    batch_started_at    timestamptz,
    page_prio           integer,
    page_txid           xid8,
    page_id             bigint,
    page_end_prio       integer,
    page_end_txid       xid8,
    page_end_id         bigint,
    page_more           boolean,
    skipped_events      bigint NOT NULL DEFAULT 0,
    skipped_at          timestamptz,
    handed_from         pg_snapshot,
    page_marks          boolean,
    started_prio        integer,
    started_txid        xid8,
    started_id          bigint,
    suspect_prio        integer,
    suspect_txid        xid8,
    suspect_id          bigint,
    released_at         timestamptz,
    PRIMARY KEY (sub_id, state_part)
) PARTITION BY LIST (state_part);
CREATE TABLE pglogq.sub_state_0 PARTITION OF pglogq.sub_state FOR VALUES IN (0) WITH (fillfactor = 50);
CREATE TABLE pglogq.sub_state_1 PARTITION OF pglogq.sub_state FOR VALUES IN (1) WITH (fillfactor = 50);
-- a batch id names one holder: unique in each partition (a row is in one partition, except
-- inside the transaction of maint_rotate_meta that moves it); ids come from batch_seq
CREATE UNIQUE INDEX sub_state_0_batch_uq ON pglogq.sub_state_0 (batch_id) WHERE batch_id IS NOT NULL;
CREATE UNIQUE INDEX sub_state_1_batch_uq ON pglogq.sub_state_1 (batch_id) WHERE batch_id IS NOT NULL;

-- open batches keep their ids, pages and frontiers: every column is copied as it is
INSERT INTO pglogq.sub_state (sub_id, last_tick, last_seen, heartbeat_at, batch_id, batch_prev_tick,
       batch_cur_tick, batch_big, batch_started_at, page_prio, page_txid, page_id, page_end_prio,
       page_end_txid, page_end_id, page_more, skipped_events, skipped_at, handed_from, page_marks,
       started_prio, started_txid, started_id, suspect_prio, suspect_txid, suspect_id, released_at)
SELECT s.sub_id, s.last_tick, s.last_seen, s.heartbeat_at, s.batch_id, s.batch_prev_tick,
       s.batch_cur_tick, s.batch_big, s.batch_started_at, s.page_prio, s.page_txid, s.page_id, s.page_end_prio,
       s.page_end_txid, s.page_end_id, s.page_more, s.skipped_events, s.skipped_at, s.handed_from, s.page_marks,
       s.started_prio, s.started_txid, s.started_id, s.suspect_prio, s.suspect_txid, s.suspect_id, s.released_at
  FROM pglogq.subscription s;

ALTER TABLE pglogq.subscription
    DROP COLUMN last_tick, DROP COLUMN last_seen, DROP COLUMN heartbeat_at, DROP COLUMN batch_id,
    DROP COLUMN batch_prev_tick, DROP COLUMN batch_cur_tick, DROP COLUMN batch_big,
    DROP COLUMN batch_started_at, DROP COLUMN page_prio, DROP COLUMN page_txid, DROP COLUMN page_id,
    DROP COLUMN page_end_prio, DROP COLUMN page_end_txid, DROP COLUMN page_end_id, DROP COLUMN page_more,
    DROP COLUMN skipped_events, DROP COLUMN skipped_at, DROP COLUMN handed_from, DROP COLUMN page_marks,
    DROP COLUMN started_prio, DROP COLUMN started_txid, DROP COLUMN started_id, DROP COLUMN suspect_prio,
    DROP COLUMN suspect_txid, DROP COLUMN suspect_id, DROP COLUMN released_at;
ALTER TABLE pglogq.subscription RENAME TO subscriber;
-- the identity row is never updated any more: the default vacuum settings suit it
ALTER TABLE pglogq.subscriber RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);

CREATE VIEW pglogq.subscription AS
SELECT s.sub_id, s.queue_id, s.consumer_name, s.parent_id, s.worker_name, s.created_at,
       st.last_tick, st.last_seen, st.heartbeat_at, st.batch_id, st.batch_prev_tick, st.batch_cur_tick,
       st.batch_big, st.batch_started_at, st.page_prio, st.page_txid, st.page_id, st.page_end_prio,
       st.page_end_txid, st.page_end_id, st.page_more, st.skipped_events, st.skipped_at, st.handed_from,
       st.page_marks, st.started_prio, st.started_txid, st.started_id, st.suspect_prio, st.suspect_txid,
       st.suspect_id, st.released_at
  FROM pglogq.subscriber s
  JOIN pglogq.sub_state st ON st.sub_id = s.sub_id;
