-- 0013_tick_event_total: each tick records how many events it closes (cumulative per queue).
--
-- tick_event_seq (the message-id sequence's last value) counts ids, not events: a rolled-back
-- send, a repeated idempotency key or a delayed send not yet due burns ids without an event, and
-- a retried or replayed event is stored again under its old id.  Batch merging, big-batch
-- detection, seek by_events and the monitoring counts now use tick_event_total instead: the
-- number of events committed into the queue up to the tick (what the batch predicate selects
-- between consecutive ticks, summed).  _tick counts them; create_queue writes 0 in tick 1.
-- Ticks written before this migration get their sequence value: the only count they have.
ALTER TABLE pglogq.tick ADD COLUMN tick_event_total bigint NOT NULL DEFAULT 0;

UPDATE pglogq.tick SET tick_event_total = tick_event_seq;

-- No default from now on: a tick written by the previous _tick (a ticker call already running
-- while this upgrade commits) fails and is retried by the new code, instead of recording 0.
ALTER TABLE pglogq.tick ALTER COLUMN tick_event_total DROP DEFAULT;
