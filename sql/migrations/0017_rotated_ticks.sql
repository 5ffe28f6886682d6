-- 0017_rotated_ticks: ticks are stored in rotated slots emptied by TRUNCATE, never deleted row by row.
--
-- Until 0016 maint_prune DELETEd old ticks: under a long transaction (a held xmin) VACUUM can free
-- none of those rows, and the tick table grew for as long as the transaction stayed open.
-- Now pglogq.tick is partitioned like pglogq.event: by queue (a partition tick_<queue_id> made by
-- create_queue), then by slot (tick_<queue_id>_0 .. _2).  The slot of a new tick is the current
-- "metadata epoch" modulo 3: pglogq.meta_epoch, a sequence advanced by maintenance
-- (maint_rotate_meta, every few seconds), read with pg_sequence_last_value (a sequence write
-- leaves no dead tuple).  maint_rotate_meta empties the oldest slot with TRUNCATE once no cursor,
-- open batch, retain_tick or newest tick needs a tick in it.  Queries by (queue_id, tick_id) are
-- unchanged; the queue's tick ids stay unique and increasing (_tick, under its advisory lock).
-- meta_epoch_time holds the unix time (seconds) of the last epoch switch.
CREATE SEQUENCE IF NOT EXISTS pglogq.meta_epoch MINVALUE 0 START 0;
CREATE SEQUENCE IF NOT EXISTS pglogq.meta_epoch_time MINVALUE 0 START 0;

ALTER TABLE pglogq.tick RENAME TO tick_unrotated;
ALTER TABLE pglogq.tick_unrotated RENAME CONSTRAINT tick_pkey TO tick_unrotated_pkey;
ALTER TABLE pglogq.tick_unrotated RENAME CONSTRAINT tick_queue_id_fkey TO tick_unrotated_queue_id_fkey;

CREATE TABLE pglogq.tick (
    queue_id         integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    tick_id          bigint NOT NULL,
    tick_time        timestamptz NOT NULL DEFAULT now(),
    tick_snapshot    pg_snapshot NOT NULL,
    tick_event_seq   bigint NOT NULL,
    tick_event_total bigint NOT NULL,
    tick_slot        smallint NOT NULL
        DEFAULT (coalesce(pg_sequence_last_value('pglogq.meta_epoch'::regclass), 0) % 3)::smallint,
    PRIMARY KEY (queue_id, tick_slot, tick_id)
) PARTITION BY LIST (queue_id);
CREATE INDEX tick_id_idx ON pglogq.tick (queue_id, tick_id);

DO $$
DECLARE
    qid integer;
    n integer;
BEGIN
    FOR qid IN SELECT q.queue_id FROM pglogq.queue q ORDER BY q.queue_id LOOP
        EXECUTE format('CREATE TABLE pglogq.%I PARTITION OF pglogq.tick FOR VALUES IN (%s) PARTITION BY LIST (tick_slot)',
                       'tick_' || qid, qid);
        FOR n IN 0 .. 2 LOOP
            EXECUTE format('CREATE TABLE pglogq.%I PARTITION OF pglogq.%I FOR VALUES IN (%s)',
                           'tick_' || qid || '_' || n, 'tick_' || qid, n);
        END LOOP;
    END LOOP;
END $$;

INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq, tick_event_total, tick_slot)
SELECT t.queue_id, t.tick_id, t.tick_time, t.tick_snapshot, t.tick_event_seq, t.tick_event_total,
       (coalesce(pg_sequence_last_value('pglogq.meta_epoch'::regclass), 0) % 3)::smallint
  FROM pglogq.tick_unrotated t;

DROP TABLE pglogq.tick_unrotated;
