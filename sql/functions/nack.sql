-- pglogq.nack(batch_id, msg_id, retry_after, reason, msg_txid, dead): this consumer failed an event.
-- Parameters: batch_id; msg_id  an event of the page receive returned last;
--             retry_after  when to deliver it again, 0 .. 366 days (default: the retry policy of
--             the event's type, set_type_config, else the queue's retry_delay);
--             reason  free text kept with the event (last 2000 bytes);
--             msg_txid  the message's txid from receive: makes the lookup O(1) (optional);
--             dead  true: straight to the dead-letter queue, whatever retries are left (a failure
--             no retry can mend, such as a payload the consumer cannot decode)
-- Returns:    'retry' (it comes back to this consumer only, with retry_count + 1 and the same
--             msg_id), or 'dead' (it had failed max_retries times before, by nacks or crashes;
--             max_retries of the event's type, set_type_config, else of the queue; with 0 its first
--             failure: moved to the dead-letter queue; always with dead => true).  Acknowledge the batch afterwards as usual.
-- Raises:     PQ008/PQ009 unknown or stale batch; PQ010 the event is not in the returned page;
--             PQ011 invalid retry_after.
-- Tables:     event, type_config (read), attempt (read; on a partition's stream, the held
--             event's count, reason and first failure), retry or dead_letter (insert, the latter
--             through _bury), sub_state (the hold of a partition's stream).  Nacking one event
--             twice in a page is a no-op.
-- On the stream of a partition (a partitioned queue) the order of a key is strict: the event
-- does not go to the retry table (it would come back after the key's later events).  Its failed
-- attempt is counted (attempt, with the reason) and the stream is held at it (lookup and jobs
-- show it as retry, with its attempts, reason and due time, through _retries): the ack that
-- follows acknowledges the page up to it only, and nobody reads the stream again before the
-- delay has passed; then it comes again with retry_count + 1, followed by the rest of the page.  Only the first event of
-- the page nacked counts: a nack of an event at or after it returns 'retry' and changes nothing
-- (it comes again anyway).  On its last allowed failure an event goes to the dead-letter queue as
-- elsewhere, and the stream goes on past it.  When the page is received again before the ack (a
-- crash), it is a new delivery: the hold is void, and a nack counts a new failure.  A nack of
-- an event buried in the stream's current batch returns 'dead' and changes nothing, and the
-- stream never hands such an event again (_batch_page), even when an earlier event of the page
-- holds the stream behind it (an event buried in an earlier batch comes again after a seek back,
-- as everywhere).
-- Plans: the queue's copy (_queue_functions) answers when it exists, with generic plans cached
-- for the session over the queue's own event and tick tables (a session's first statement
-- naming the shared parents builds their partition lists: 18 ms at 1,000 queues).  Without one:
-- custom (plan_cache_mode), so that each read of the event and tick tables is planned with the
-- queue's id and reads and locks that queue's partitions only (after five calls a generic plan
-- was chosen, which covers and locks every queue's partitions: cost and locks grew with the
-- number of queues).
CREATE OR REPLACE FUNCTION pglogq.nack(
    batch_id bigint, msg_id bigint, retry_after interval DEFAULT NULL, reason text DEFAULT NULL,
    msg_txid xid8 DEFAULT NULL, dead boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    h pglogq.subscription;
    q pglogq.queue;
    owner integer;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    e pglogq.event;
    delay interval;
    maxr integer;
    lo xid8;
    hi xid8;
    tries integer;
    copy_of integer;
    outcome text;
BEGIN
    -- queue copy: from here
    -- the queue's own copy of this function (_queue_functions), whose cached generic plans read
    -- and lock its tables only; none (no batch, or no copy yet): the body below says what
    SELECT s.queue_id INTO copy_of FROM pglogq.subscription s WHERE s.batch_id = nack.batch_id;
    IF copy_of IS NOT NULL AND to_regproc(format('pglogq.%I', '_q' || copy_of || '_@copies@_nack')) IS NOT NULL THEN
        EXECUTE format('SELECT pglogq.%I($1, $2, $3, $4, $5, $6)', '_q' || copy_of || '_@copies@_nack')
           INTO outcome USING batch_id, msg_id, retry_after, reason, msg_txid, dead;
        RETURN outcome;
    END IF;
    -- queue copy: to here
    h := pglogq._holder(batch_id);
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = h.queue_id;
    IF retry_after < interval '0' OR retry_after > interval '366 days' THEN
        RAISE EXCEPTION 'invalid retry_after %: use 0 .. 366 days', retry_after USING ERRCODE = 'PQ011';
    END IF;
    owner := coalesce(h.parent_id, h.sub_id);
    SELECT t.tick_snapshot INTO prev_snap FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id = h.batch_prev_tick;
    SELECT t.tick_snapshot INTO cur_snap FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id = h.batch_cur_tick;
    -- the batch's txid range, or just the message's txid when the caller gave it: plain bounds,
    -- so that even a cached generic plan looks the event up in the (ev_txid, ev_id) index
    lo := pg_snapshot_xmin(prev_snap);
    hi := pg_snapshot_xmax(cur_snap);
    IF msg_txid IS NOT NULL THEN
        lo := greatest(lo, msg_txid);
        hi := least(hi, msg_txid);
    END IF;
    SELECT * INTO e FROM pglogq.event x
     WHERE x.ev_queue = q.queue_id AND x.ev_id = nack.msg_id
       AND x.ev_txid >= lo AND x.ev_txid <= hi
       AND pg_visible_in_snapshot(x.ev_txid, cur_snap) AND NOT pg_visible_in_snapshot(x.ev_txid, prev_snap)
       AND (x.ev_owner IS NULL OR x.ev_owner = owner)
       AND CASE WHEN coalesce(h.stream, h.lease_stream) IS NULL THEN NOT (q.urgent_lane AND x.ev_priority > 100)
                WHEN coalesce(h.stream, h.lease_stream) = -1 THEN x.ev_priority > 100
                WHEN coalesce(h.stream, h.lease_stream) <= -2
                THEN x.ev_id % 8 = -2 - coalesce(h.stream, h.lease_stream) AND NOT (q.urgent_lane AND x.ev_priority > 100)
                ELSE x.ev_partition = h.stream END
       AND pglogq._page_position(h, x.ev_priority, x.ev_txid, x.ev_id) = 0
     LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % is not in the page of batch % that receive returned', msg_id, batch_id
            USING ERRCODE = 'PQ010';
    END IF;
    IF h.stream >= 0 AND EXISTS (SELECT 1 FROM pglogq.dead_letter d
                                  WHERE d.sub_id = owner AND d.msg_id = e.ev_id AND d.failed_at >= h.batch_started_at) THEN
        RETURN 'dead';  -- buried already in this batch (by an earlier nack of its page): a no-op
    END IF;
    IF h.stream >= 0 AND h.hold_id IS NOT NULL AND (h.hold_txid, h.hold_id) <= (e.ev_txid, e.ev_id) THEN
        -- an event of the page at or after the one holding the stream: it comes again anyway (a
        -- second nack of the holding event in this delivery is a no-op, as everywhere)
        RETURN 'retry';
    END IF;
    reason := right(reason, 2000);
    -- failed attempts so far: nacks (the event's retry count) and crashes in this batch
    SELECT e.ev_retry + coalesce((SELECT a.crashes FROM pglogq.attempt a
                                   WHERE a.sub_id = h.sub_id AND a.msg_id = e.ev_id), 0) INTO tries;
    -- how many the event's type allows, and the wait before the next (_retry_rule owns the rule)
    SELECT r.max_retries, coalesce(retry_after, r.delay) INTO maxr, delay
      FROM pglogq._retry_rule(q, e.ev_type, tries) r;
    IF tries >= maxr OR nack.dead THEN
        PERFORM pglogq._bury(e, owner, tries, reason);
        RETURN 'dead';
    END IF;
    IF h.stream >= 0 THEN
        INSERT INTO pglogq.attempt AS a (sub_id, msg_id, ev_priority, ev_txid, crashes, reason, first_at)
        VALUES (h.sub_id, e.ev_id, e.ev_priority, e.ev_txid, 1, reason, clock_timestamp())
        ON CONFLICT (sub_id, msg_id) DO UPDATE
           SET crashes = a.crashes + 1, last_at = clock_timestamp(), reason = EXCLUDED.reason;
        UPDATE pglogq.sub_state s
           SET hold_txid = e.ev_txid, hold_id = e.ev_id, hold_until = clock_timestamp() + delay
         WHERE s.sub_id = h.sub_id;
        RETURN 'retry';
    END IF;
    -- the daemon's maintenance pump, paused while its ticker sleeps, is woken at commit
    PERFORM pglogq._wake_ticker();
    INSERT INTO pglogq.retry (queue_id, sub_id, msg_id, due_at, retry_count, ev_time, ev_type, ev_payload,
                              ev_headers, ev_priority, reason, first_failed_at, ev_key)
    VALUES (q.queue_id, owner, e.ev_id, clock_timestamp() + delay, tries + 1, e.ev_time, e.ev_type,
            e.ev_payload, e.ev_headers, e.ev_priority, reason, coalesce(e.ev_failed_at, clock_timestamp()), e.ev_key)
    ON CONFLICT (sub_id, msg_id) DO NOTHING;
    RETURN 'retry';
END $$;
