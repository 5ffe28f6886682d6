-- 0040_stream_due: the streams of a partitioned queue's consumer that may have something to read, kept as a set that receive reads with LIMIT.
--
-- Until now every receive on a partitioned queue moved every empty stream of its consumer to
-- the newest tick (one probe per partition) and chose its stream among all of them: a receive
-- cost the partition count, and a round over the partitions (one receive each) its square.
-- Now the set of streams that may have work is kept, and a receive touches only the streams it
-- hands out:
--
-- pglogq.sub_state.due_of     on a partition's stream: its consumer's sub_id while the stream
--                             may have something to read (an event after its cursor, an open
--                             batch, a page out, a hold), NULL once a receive found it empty up
--                             to due_tick.  Set by _stream_skip for the partitions that got
--                             events in the ticks it takes in, cleared by _stream_pick.
-- pglogq.sub_state.due_tick   on a stream: the newest tick that put it in the set (cleared only
--                             by a receive that read up to it); on a consumer: the newest tick
--                             whose events are in its streams' set (NULL: none yet, or a seek,
--                             retention or layout change moved the streams; the next receive
--                             then puts every stream in the set).
-- pglogq.sub_state.due_order  on a stream: when a worker was last given it (NULL: never), so
--                             that the stream served longest ago goes first.
-- pglogq.sub_state.out_worker on a stream: the worker last given it, until a receive sees its
--                             page acknowledged or taken over (the worker's own page found
--                             without a look at every stream).
-- Only streams' rows ever set due_of, due_order and out_worker, the indexed columns: updates of
-- a consumer's or worker's row change no indexed column and stay HOT.
ALTER TABLE pglogq.sub_state
    ADD COLUMN due_of integer,
    ADD COLUMN due_tick bigint,
    ADD COLUMN due_order timestamptz,
    ADD COLUMN out_worker text;

CREATE INDEX sub_state_due_idx ON pglogq.sub_state (due_of, due_order NULLS FIRST, sub_id)
    WHERE due_of IS NOT NULL;
CREATE INDEX sub_state_out_idx ON pglogq.sub_state (due_of, out_worker)
    WHERE due_of IS NOT NULL AND out_worker IS NOT NULL;

-- a page out on an upgraded database: its worker finds it again through out_worker (the due set
-- itself is filled by the first receive of each consumer: due_tick is NULL)
UPDATE pglogq.sub_state st SET out_worker = st.lease_worker
 WHERE st.page_end_txid IS NOT NULL AND st.lease_worker IS NOT NULL;
