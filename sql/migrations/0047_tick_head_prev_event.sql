-- 0047_tick_head_prev_event: each queue's event tick before its last one, in its tick_head row.
--
-- pglogq.tick_head   prev_event_tick, prev_event_total: the last tick that closed events before
--                    event_tick (or a later tick, never an earlier one), and the queue's event
--                    total there.  Every tick from prev_event_tick up to event_tick (excluded)
--                    has that total: no tick between them closed an event.  Written by
--                    pglogq._tick with each tick that closes events.  With them a consumer
--                    whose cursor (and open batches) lie in that run, behind only the last
--                    tick of events -- every consumer of a queue that is not kept busy --
--                    has its lag, unread and pending figures from this row, so that
--                    consumer_info() of every queue reads no tick partition for it: the first
--                    read of a queue's tick partitions in a session costs about a millisecond
--                    (their relation cache entries), 1.5 s for 1,000 queues.
-- NULL in the rows of earlier queues (filling them would read every queue's tick partitions in
-- one transaction, which at 1,000 queues runs out of the lock table): NULL reads "not known",
-- and consumer_info reads that queue's ticks as before; its next tick of events fills both.
ALTER TABLE pglogq.tick_head ADD COLUMN IF NOT EXISTS prev_event_tick bigint;
ALTER TABLE pglogq.tick_head ADD COLUMN IF NOT EXISTS prev_event_total bigint;
