-- 0023_layout_change: a queue's layout (partitions, urgent lane) can change once nothing is in
-- flight, not only while the queue is new.
--
-- pglogq.queue.layout_epoch  counts the queue's layout changes.  It is part of a unique key, so
--                            that a change is a key update of the queue row: a REPEATABLE READ
--                            or SERIALIZABLE producer whose snapshot predates the change (it
--                            would compute partitions with the old count) fails the FOR KEY SHARE
--                            lock every send takes outside READ COMMITTED (see pglogq._queue) with
--                            40001 instead of writing an event into a partition no stream reads.
--                            Other updates of the row (rotation, settings) are not key updates
--                            and go on conflicting with nothing.
ALTER TABLE pglogq.queue ADD COLUMN layout_epoch integer NOT NULL DEFAULT 0;
ALTER TABLE pglogq.queue ADD CONSTRAINT queue_layout_epoch_key UNIQUE (queue_id, layout_epoch);
