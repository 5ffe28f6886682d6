-- 0040_stream_due: the streams of a partitioned queue's consumer that may have something to read, kept as marks that receive reads with LIMIT.
--
-- Until now every receive on a partitioned queue moved every empty stream of its consumer to
-- the newest tick (one probe per partition) and chose its stream among all of them: a receive
-- cost the partition count, and a round over the partitions (one receive each) its square.
-- Now the streams that may have work are marked, and a receive touches only the streams it
-- hands out:
--
-- pglogq.stream_mark          insert-only marks: consumer_id's stream of partition `stream` may
--                             have events up to tick_id, and had nothing unread up to since_tick
--                             beyond its cursor.  Inserted by _stream_skip for the partitions
--                             that got events in the ticks it takes in (any receive may insert
--                             them, a duplicate costs nothing: marks are never updated, so
--                             nobody waits for them); deleted by the receive that holds the
--                             stream, only up to the tick it read through (a mark of a newer
--                             tick, inserted meanwhile, stays: no lost wake-up), or replaced by
--                             one mark with a new seq when a worker is given the stream (seq:
--                             the stream served longest ago first).
-- pglogq.sub_state.due_tick   on a consumer: the newest tick whose partitions are marked (NULL:
--                             none yet, or a seek or layout change moved the streams; the next
--                             receive then marks every stream with something to read).
-- pglogq.sub_state.mark_epoch on a consumer: counts its seeks and layout changes; a mark counts
--                             only in the epoch it was made in (a receive that read due_tick
--                             before a seek may insert its marks after it: they are ignored).
-- pglogq.sub_state.out_of, out_worker  on a stream: its consumer and the worker last given it,
--                             until a receive sees its page acknowledged or taken over (a
--                             worker's own page found without a look at every stream).  Only a
--                             stream's row ever sets them: updates of a consumer's or worker's
--                             row change no indexed column and stay HOT.
CREATE SEQUENCE pglogq.stream_mark_seq;

CREATE TABLE pglogq.stream_mark (
    consumer_id integer NOT NULL REFERENCES pglogq.subscriber (sub_id) ON DELETE CASCADE,
    stream      smallint NOT NULL,
    tick_id     bigint NOT NULL,
    since_tick  bigint,
    epoch       integer NOT NULL,
    seq         bigint NOT NULL DEFAULT nextval('pglogq.stream_mark_seq')
);
CREATE INDEX stream_mark_order_idx ON pglogq.stream_mark (consumer_id, seq);
CREATE INDEX stream_mark_stream_idx ON pglogq.stream_mark (consumer_id, stream, tick_id);

ALTER TABLE pglogq.sub_state
    ADD COLUMN due_tick bigint,
    ADD COLUMN mark_epoch integer NOT NULL DEFAULT 0,
    ADD COLUMN out_of integer,
    ADD COLUMN out_worker text;

CREATE INDEX sub_state_out_idx ON pglogq.sub_state (out_of, out_worker) WHERE out_of IS NOT NULL;

-- a page out on an upgraded database: its worker finds it again through out_worker (the marks
-- are made by the first receive of each consumer: due_tick is NULL)
UPDATE pglogq.sub_state st SET out_of = x.parent_id, out_worker = st.lease_worker
  FROM pglogq.subscriber x
 WHERE x.sub_id = st.sub_id AND x.stream >= 0
   AND st.page_end_txid IS NOT NULL AND st.lease_worker IS NOT NULL;
