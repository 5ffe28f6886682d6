-- pglogq._stream_skip(q, consumer_id): take the queue's new ticks into the set of a partitioned
-- queue's consumer's streams that may have something to read (the "due" set that _stream_pick
-- reads), and put the consumer's cursor on its slowest stream.
-- Parameters: q  the queue (partitions > 1); consumer_id  the consumer's sub_id
-- Returns:    the number of streams put in the set (0 when no tick is new to this consumer).
-- Raises:     nothing.
-- Tables:     sub_state (the consumer's row locked and its cursor and due_tick updated; the
--             streams of the partitions that got events: due_of, due_tick and, for a stream out
--             of the set, last_tick), subscriber, tick, event (read: the events of the new ticks,
--             or one probe per partition through the (ev_partition, ev_txid, ev_id) index,
--             whichever reads less).
-- Cost: nothing but two index probes when no tick is new to the consumer (every receive but the
-- first after a tick); else the events of the new ticks or one probe per partition, whichever is
-- fewer, once per tick and consumer, never once per receive.  The streams of partitions that got
-- nothing are not touched: a stream out of the set has nothing to read up to the consumer's
-- due_tick, whatever its own cursor says (_slowest_tick and _set_layout read it so), and its
-- cursor is brought to due_tick when it comes back into the set, before a batch reads from it.
-- Concurrency: one caller per consumer and new tick (the consumer's row is locked first, as seek
-- and retention lock it, then the streams, waiting for a receive that holds one: a receive holds
-- a stream and then never waits for the consumer's row, see _stream_pick).  A stream that a
-- receive is taking out of the set (found empty up to its due_tick) is marked again after that
-- receive commits, never lost: the mark is an UPDATE that waits for the stream's row lock.
-- due_tick NULL on the consumer (a new consumer, an upgrade, a seek, a retention move, a layout
-- change): every stream goes into the set, once.
CREATE OR REPLACE FUNCTION pglogq._stream_skip(q pglogq.queue, consumer_id integer)
RETURNS integer LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
DECLARE
    newest pglogq.tick;
    since pglogq.tick;
    taken bigint;
    parts smallint[];
    n integer;
BEGIN
    SELECT * INTO newest FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    IF newest.tick_id IS NULL THEN
        RETURN 0;
    END IF;
    -- locked only when a tick is new to the consumer: a caller that waited here for another one
    -- taking the same ticks in finds the row moved on and returns
    SELECT st.due_tick INTO taken FROM pglogq.sub_state st
     WHERE st.sub_id = consumer_id AND (st.due_tick IS NULL OR st.due_tick < newest.tick_id)
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF taken IS NOT NULL THEN
        SELECT * INTO since FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = taken;
    END IF;
    IF since.tick_id IS NULL THEN
        -- nothing known (or its tick is gone): every stream may have something
        UPDATE pglogq.sub_state s SET due_of = consumer_id, due_tick = newest.tick_id
         WHERE s.sub_id IN (SELECT x.sub_id FROM pglogq.subscriber x
                             WHERE x.parent_id = consumer_id AND x.stream >= 0);
        GET DIAGNOSTICS n = ROW_COUNT;
    ELSE
        IF newest.tick_event_total - since.tick_event_total <= q.partitions THEN
            -- fewer events than partitions: the partitions of the new ticks' events
            parts := ARRAY(SELECT DISTINCT e.ev_partition FROM pglogq.event e
                            WHERE e.ev_queue = q.queue_id
                              AND e.ev_txid >= pg_snapshot_xmin(since.tick_snapshot)
                              AND e.ev_txid < pg_snapshot_xmax(newest.tick_snapshot)
                              AND pg_visible_in_snapshot(e.ev_txid, newest.tick_snapshot)
                              AND NOT pg_visible_in_snapshot(e.ev_txid, since.tick_snapshot)
                              AND (e.ev_owner IS NULL OR e.ev_owner = consumer_id));
        ELSE
            -- more: one probe per partition
            parts := ARRAY(SELECT p::smallint FROM generate_series(0, q.partitions - 1) p
                            WHERE EXISTS (
                                SELECT 1 FROM pglogq.event e
                                 WHERE e.ev_queue = q.queue_id AND e.ev_partition = p
                                   AND e.ev_txid >= pg_snapshot_xmin(since.tick_snapshot)
                                   AND e.ev_txid < pg_snapshot_xmax(newest.tick_snapshot)
                                   AND pg_visible_in_snapshot(e.ev_txid, newest.tick_snapshot)
                                   AND NOT pg_visible_in_snapshot(e.ev_txid, since.tick_snapshot)
                                   AND (e.ev_owner IS NULL OR e.ev_owner = consumer_id)));
        END IF;
        -- a stream out of the set had nothing up to since: its cursor goes there (a tick the
        -- consumer's cursor keeps from rotation), so that its next batch starts after it
        UPDATE pglogq.sub_state s
           SET last_tick = CASE WHEN s.due_of IS NULL AND s.batch_id IS NULL
                                THEN greatest(s.last_tick, since.tick_id) ELSE s.last_tick END,
               due_of = consumer_id, due_tick = newest.tick_id
         WHERE s.sub_id IN (SELECT x.sub_id FROM pglogq.subscriber x
                             WHERE x.parent_id = consumer_id AND x.stream = ANY (parts));
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    -- the consumer's cursor: at its slowest stream of the set, or at the newest tick when the set
    -- is empty (only ever forward: a stream read at its old place keeps it behind, never ahead)
    UPDATE pglogq.sub_state s
       SET due_tick = newest.tick_id,
           last_tick = greatest(s.last_tick,
                                least(newest.tick_id, (SELECT min(o.last_tick) FROM pglogq.sub_state o
                                                        WHERE o.due_of = consumer_id)))
     WHERE s.sub_id = consumer_id;
    RETURN n;
END $$;
