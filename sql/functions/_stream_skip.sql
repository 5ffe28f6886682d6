-- pglogq._stream_skip(q, consumer_id): mark the streams of a partitioned queue's consumer whose
-- partitions got events in the ticks new to it (pglogq.stream_mark, which _stream_pick reads),
-- and put the consumer's cursor on its slowest marked stream.
-- Parameters: q  the queue (partitions > 1); consumer_id  the consumer's sub_id
-- Returns:    the number of marks inserted (0 when no tick is new to this consumer).
-- Raises:     nothing.
-- Tables:     stream_mark (insert), sub_state (the consumer's due_tick and cursor, when no other
--             receive holds its row), subscriber, tick, event (read: the events of the new
--             ticks, or one probe per partition through the (ev_partition, ev_txid, ev_id) index,
--             whichever reads less).
-- Cost: two index probes when no tick is new to the consumer (every receive but the first after
-- a tick); else the events of the new ticks or one probe per partition, whichever is fewer, once
-- per tick and consumer, never once per receive.  The streams of partitions that got nothing are
-- not touched: a stream without a mark has nothing to read up to the consumer's due_tick,
-- whatever its own cursor says (_slowest_tick and _set_layout read it so); _stream_pick brings
-- its cursor to its marks' since_tick before a batch reads from it.
-- Concurrency: nothing here waits for another receive.  Marks are only inserted (two receives
-- taking the same ticks in insert the same marks twice, which costs a duplicate); due_tick moves
-- only with the consumer's row locked without waiting (SKIP LOCKED: the receive holding it moves
-- it), and in the transaction that inserted the marks of every tick up to it, so whoever reads
-- the new due_tick reads those marks too.  A receive that holds a stream deletes its marks only up
-- to the tick it read through: a mark of a later tick, inserted meanwhile, stays.
-- A seek or a layout change between the read of due_tick and the insert: the marks carry the
-- consumer's mark_epoch read with due_tick, which the seek moved on, so they count for nothing.
-- due_tick NULL on the consumer (a new consumer, an upgrade, a seek, a layout change): every
-- stream with something to read from its own cursor is marked, found in one statement (one
-- probe per partition), once.
CREATE OR REPLACE FUNCTION pglogq._stream_skip(q pglogq.queue, consumer_id integer)
RETURNS integer LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off AS $$
DECLARE
    newest pglogq.tick;
    since pglogq.tick;
    taken bigint;
    ep integer;
    parts smallint[];
    n integer;
BEGIN
    SELECT * INTO newest FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    IF newest.tick_id IS NULL THEN
        RETURN 0;
    END IF;
    SELECT st.due_tick, st.mark_epoch INTO taken, ep FROM pglogq.sub_state st WHERE st.sub_id = consumer_id;
    IF taken >= newest.tick_id THEN
        RETURN 0;
    END IF;
    IF taken IS NOT NULL THEN
        SELECT * INTO since FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = taken;
    END IF;
    IF since.tick_id IS NULL THEN
        -- nothing known (or its tick is gone): the streams with something to read, each from its
        -- own cursor; a stream whose cursor tick is gone is marked too, for receive to say so
        INSERT INTO pglogq.stream_mark (consumer_id, stream, tick_id, since_tick, epoch)
        SELECT _stream_skip.consumer_id, x.stream, newest.tick_id, st.last_tick, ep
          FROM pglogq.subscriber x
          JOIN pglogq.sub_state st ON st.sub_id = x.sub_id
          LEFT JOIN pglogq.tick t ON t.queue_id = q.queue_id AND t.tick_id = st.last_tick
         WHERE x.parent_id = consumer_id AND x.stream >= 0
           AND (st.batch_id IS NOT NULL OR st.page_end_txid IS NOT NULL OR st.hold_until IS NOT NULL
                OR t.tick_id IS NULL
                OR (st.last_tick < newest.tick_id AND EXISTS (
                    SELECT 1 FROM pglogq.event e
                     WHERE e.ev_queue = q.queue_id AND e.ev_partition = x.stream
                       AND e.ev_txid >= pg_snapshot_xmin(t.tick_snapshot)
                       AND e.ev_txid < pg_snapshot_xmax(newest.tick_snapshot)
                       AND pg_visible_in_snapshot(e.ev_txid, newest.tick_snapshot)
                       AND NOT pg_visible_in_snapshot(e.ev_txid, t.tick_snapshot)
                       AND (e.ev_owner IS NULL OR e.ev_owner = consumer_id))));
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
        -- since: every tick up to it is marked, so an unmarked stream had nothing up to it
        INSERT INTO pglogq.stream_mark (consumer_id, stream, tick_id, since_tick, epoch)
        SELECT _stream_skip.consumer_id, p, newest.tick_id, since.tick_id, ep FROM unnest(parts) p;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    -- the consumer's cursor: at its slowest marked stream, or at the newest tick when none is
    -- marked (only ever forward: a stream read at its old place keeps it behind, never ahead)
    PERFORM 1 FROM pglogq.sub_state st WHERE st.sub_id = consumer_id FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE pglogq.sub_state s
           SET due_tick = newest.tick_id,
               last_tick = greatest(s.last_tick, least(newest.tick_id, (
                   SELECT min(st.last_tick) FROM pglogq.subscriber x JOIN pglogq.sub_state st ON st.sub_id = x.sub_id
                    WHERE x.parent_id = consumer_id
                      AND x.stream IN (SELECT m.stream FROM pglogq.stream_mark m
                                        WHERE m.consumer_id = _stream_skip.consumer_id AND m.epoch = ep))))
         WHERE s.sub_id = consumer_id AND (s.due_tick IS NULL OR s.due_tick < newest.tick_id)
           AND s.mark_epoch = ep;  -- a seek since: these marks count for nothing
    END IF;
    RETURN n;
END $$;
