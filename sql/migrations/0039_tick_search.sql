-- 0039_tick_search: the admin calls find a tick by its event count, its id sequence or its time
-- with one index probe, not a walk over every kept tick.
--
-- Ticks are kept for as long as the slowest consumer needs them: 100,000 and more on a queue
-- whose consumer is far behind.  tick_event_total, tick_event_seq and tick_time never decrease
-- with tick_id (one ticker per queue at a time, under _tick's advisory lock: a cumulative count,
-- the id sequence read before the snapshot, the clock), so the tick nearest a count or a time
-- is the first or last entry of an index on that column:
--   tick_total_idx  (queue_id, tick_event_total, tick_id): seek_plan(by_events =>)
--   tick_seq_idx    (queue_id, tick_event_seq, tick_id):   _event_txid_floor (lookup of an old event)
--   tick_time_idx   (queue_id, tick_time, tick_id):        seek_plan to a time, queue_info's
--                                                           events_per_second baseline
-- On the partitioned parent: every queue's tick partitions (and the ones create_queue makes
-- later) get them.
CREATE INDEX IF NOT EXISTS tick_total_idx ON pglogq.tick (queue_id, tick_event_total, tick_id);
CREATE INDEX IF NOT EXISTS tick_seq_idx ON pglogq.tick (queue_id, tick_event_seq, tick_id);
CREATE INDEX IF NOT EXISTS tick_time_idx ON pglogq.tick (queue_id, tick_time, tick_id);
