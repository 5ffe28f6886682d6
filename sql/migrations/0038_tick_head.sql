-- 0038_tick_head: each queue's last tick in one small row, so that a pass over all queues reads no partition.
--
-- pglogq.tick_head   one row per queue: its last tick (tick_id, tick_time) and quiet_seq, the last
--                    value of the queue's message-id sequence below which every event is in a
--                    tick (NULL: a send of the queue was in flight when the tick was written, so
--                    an event with an older id may still come), and tick_xmax, the xmax of the
--                    tick's snapshot (ticker_check's highest txid seen, without the partitions).  Written by pglogq._tick with
--                    each tick and by create_queue; read by pglogq.ticker, whose pass over all
--                    queues probes the event table only of a queue whose sequence moved past
--                    quiet_seq (a send, or a pump or replay, which draw an id to say so), whose
--                    quiet_seq is NULL or whose keep-alive tick is due.  The ticks themselves
--                    are partitioned per queue: reading the last tick of every queue planned
--                    and locked every queue's tick partitions (at 1,000 queues the ticker's
--                    pass ran out of the lock table, and took 0.2 ms a queue when it did not).
-- Filled here from each queue's last tick, quiet_seq its tick_event_seq: a send in flight at the
-- last tick before the upgrade waits at most for the queue's keep-alive tick (a NULL would make
-- every queue probed in the first pass, which at 1,000 queues runs out of the lock table).
CREATE TABLE IF NOT EXISTS pglogq.tick_head (
    queue_id   integer PRIMARY KEY REFERENCES pglogq.queue (queue_id) ON DELETE CASCADE,
    tick_id    bigint NOT NULL,
    tick_time  timestamptz NOT NULL,
    quiet_seq  bigint,
    tick_xmax  xid8 NOT NULL
) WITH (fillfactor = 50);
INSERT INTO pglogq.tick_head (queue_id, tick_id, tick_time, quiet_seq, tick_xmax)
SELECT DISTINCT ON (t.queue_id) t.queue_id, t.tick_id, t.tick_time, t.tick_event_seq, pg_snapshot_xmax(t.tick_snapshot)
  FROM pglogq.tick t
 ORDER BY t.queue_id, t.tick_id DESC
    ON CONFLICT (queue_id) DO NOTHING;
