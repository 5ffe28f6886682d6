-- 0041_tick_head_event_time: when each queue's events were last ticked, in its tick_head row.
--
-- pglogq.tick_head   event_tick, event_time: the tick_id and tick_time of the last tick of the
--                    queue that closed at least one event (tick 1 and its time: none ever did).
--                    Written by pglogq._tick with each tick and by create_queue.  Read by the
--                    listings of every queue: a queue whose events were last ticked more than a
--                    minute ago ticked none in the last minute, so its rate is 0 (queue_info), and
--                    a consumer at or after event_tick has nothing pending (consumer_info), both
--                    without reading the queue's ticks.  Reading each queue's tick partitions for
--                    that planned and locked about a dozen relations a queue (at 1,000 queues the
--                    listings ran out of the lock table), and the first read of a queue's
--                    partitions in a session cost about a millisecond.
-- NULL in the rows of earlier queues (filling them would read every queue's tick partitions in
-- one transaction, which at 1,000 queues runs out of the lock table): NULL reads "not known", and
-- the listings then read that queue's ticks as before; its next tick fills both (_tick).
ALTER TABLE pglogq.tick_head ADD COLUMN IF NOT EXISTS event_tick bigint;
ALTER TABLE pglogq.tick_head ADD COLUMN IF NOT EXISTS event_time timestamptz;
