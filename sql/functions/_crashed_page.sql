-- pglogq._crashed_page(q, h, prev_snap, cur_snap): count a failed attempt for every event of a page
-- that was handed out, whose handler started, and that was never acknowledged (the one owner of
-- "a crash is a failed attempt").
-- Parameters: q  the queue; h  the holder row (locked by receive) whose open page has a handler-
--             start frontier (started_*) from an earlier hand-out; prev_snap, cur_snap  the
--             snapshots of the batch's ticks
-- Returns:    h with the page taken back (page_end_*, started_* cleared), the run under suspicion
--             (suspect_*) set to the started events, and, when a single started event has failed
--             max_retries + 1 times, its place passed (page_* moved past it, as if acknowledged).
-- Raises:     nothing.
-- Tables:     attempt (insert/update; the buried event's row deleted), event (read),
--             dead_letter (through _bury).
-- The started events are those of the page from its start up to the frontier: the worker
-- that held it was killed, lost its connection, or its batch was taken over after it fell
-- silent.  Which of several started events killed it is not known, so each counts an attempt
-- (retry_count + 1 when handed out again) and receive hands the run out again in halves
-- (suspect_*); only an event that crashed standing alone is buried, so that the other events of
-- its page are handled normally.  A caller that never marks starts (start_first NULL) is not
-- counted: its pages are handed out again as they were.
CREATE OR REPLACE FUNCTION pglogq._crashed_page(
    q pglogq.queue, h pglogq.subscription, prev_snap pg_snapshot, cur_snap pg_snapshot)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    owner integer := coalesce(h.parent_id, h.sub_id);
    started pglogq.message[];
    m pglogq.message;
    tries integer;
    e pglogq.event;
BEGIN
    started := ARRAY(SELECT x FROM pglogq._batch_page(q.queue_id, owner, prev_snap, cur_snap, h.batch_big,
                                                      h.page_prio, h.page_txid, h.page_id, 100001,
                                                      coalesce(h.stream, h.lease_stream),
                                                      q.urgent_lane AND coalesce(h.stream, h.lease_stream, -2) <= -2,
                                                      h.batch_started_at) x
                      WHERE pglogq._page_position(h, x.priority, x.txid, x.msg_id, true) = 0);
    INSERT INTO pglogq.attempt AS a (sub_id, msg_id, ev_priority, ev_txid, crashes)
    SELECT h.sub_id, x.msg_id, x.priority, x.txid, 1 FROM unnest(started) x
        ON CONFLICT (sub_id, msg_id) DO UPDATE SET crashes = a.crashes + 1, last_at = clock_timestamp();
    h.suspect_prio := h.started_prio;
    h.suspect_txid := h.started_txid;
    h.suspect_id := h.started_id;
    IF cardinality(started) = 1 THEN
        m := started[1];
        SELECT a.crashes INTO tries FROM pglogq.attempt a WHERE a.sub_id = h.sub_id AND a.msg_id = m.msg_id;
        IF m.retry_count + tries > (SELECT r.max_retries FROM pglogq._retry_rule(q, m.type, 0) r) THEN  -- per type
            SELECT * INTO e FROM pglogq.event x
             WHERE x.ev_queue = q.queue_id AND x.ev_txid = m.txid AND x.ev_id = m.msg_id
               AND (x.ev_owner IS NULL OR x.ev_owner = owner)
             LIMIT 1;
            PERFORM pglogq._bury(e, owner, m.retry_count + tries - 1,
                format('the handler never finished: %s hand-out(s) ended without ack or nack (the worker was '
                       'killed, lost its connection, or its batch was taken over)%s', tries,
                       CASE WHEN m.retry_count > 0 THEN format(', after %s nack(s)', m.retry_count) ELSE '' END));
            DELETE FROM pglogq.attempt a WHERE a.sub_id = h.sub_id AND a.msg_id = m.msg_id;
            RAISE NOTICE 'message % of queue "%" went to the dead-letter queue: its handler never finished % times',
                m.msg_id, q.queue_name, tries;
            h.page_prio := m.priority;
            h.page_txid := m.txid;
            h.page_id := m.msg_id;
            h.suspect_prio := NULL;
            h.suspect_txid := NULL;
            h.suspect_id := NULL;
        END IF;
    END IF;
    h.started_prio := NULL;
    h.started_txid := NULL;
    h.started_id := NULL;
    h.page_end_prio := NULL;
    h.page_end_txid := NULL;
    h.page_end_id := NULL;
    h.page_more := NULL;
    RETURN h;
END $$;
