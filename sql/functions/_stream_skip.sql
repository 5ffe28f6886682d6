-- pglogq._stream_skip(q, consumer_id): move every stream of a partitioned queue's consumer that
-- has nothing to read up to the queue's newest tick, in one statement.
-- Parameters: q  the queue (partitions > 1); consumer_id  the consumer's sub_id
-- Returns:    the number of streams moved.
-- Raises:     nothing.
-- Tables:     sub_state (update of the streams' and the consumer's last_tick), subscriber, tick,
--             event (read, through the (ev_partition, ev_txid, ev_id) index).
-- A stream with no open batch whose partition has no event committed between its cursor tick
-- and the newest tick would otherwise be visited by receive one at a time (a batch taken, found
-- empty, closed: several statements per partition, seconds for a thousand partitions after
-- every tick).  Streams locked by another receive are skipped (SKIP LOCKED); the consumer's
-- cursor then follows its slowest stream, as _take_batch does, and is put back on it even when
-- nothing moved here (see below).
CREATE OR REPLACE FUNCTION pglogq._stream_skip(q pglogq.queue, consumer_id integer)
RETURNS integer LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    newest pglogq.tick;
    n integer;
BEGIN
    SELECT * INTO newest FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    UPDATE pglogq.sub_state s SET last_tick = newest.tick_id, last_seen = clock_timestamp()
     WHERE s.sub_id IN (
        SELECT st.sub_id
          FROM pglogq.subscriber x
          JOIN pglogq.sub_state st ON st.sub_id = x.sub_id
          JOIN pglogq.tick t ON t.queue_id = q.queue_id AND t.tick_id = st.last_tick
         WHERE x.parent_id = consumer_id AND x.stream >= 0 AND st.batch_id IS NULL
           AND st.last_tick < newest.tick_id
           AND NOT EXISTS (
               SELECT 1 FROM pglogq.event e
                WHERE e.ev_queue = q.queue_id AND e.ev_partition = x.stream
                  AND e.ev_txid >= pg_snapshot_xmin(t.tick_snapshot)
                  AND e.ev_txid < pg_snapshot_xmax(newest.tick_snapshot)
                  AND pg_visible_in_snapshot(e.ev_txid, newest.tick_snapshot)
                  AND NOT pg_visible_in_snapshot(e.ev_txid, t.tick_snapshot)
                  AND (e.ev_owner IS NULL OR e.ev_owner = consumer_id))
           FOR NO KEY UPDATE OF st SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    -- also when no stream moved here: two streams that moved in concurrent transactions each
    -- saw the other at its old place and left the consumer's cursor behind both (_take_batch);
    -- every receive puts it back on the slowest stream (a no-op, without a lock, when it is)
    UPDATE pglogq.sub_state s
       SET last_tick = (SELECT min(o.last_tick) FROM pglogq.subscription o
                         WHERE o.parent_id = consumer_id AND o.stream >= 0)
     WHERE s.sub_id = consumer_id
       AND s.last_tick < (SELECT min(o.last_tick) FROM pglogq.subscription o
                           WHERE o.parent_id = consumer_id AND o.stream >= 0);
    RETURN n;
END $$;
