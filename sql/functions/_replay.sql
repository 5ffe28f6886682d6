-- pglogq._replay(dead_ids): send dead letters back to the consumers that dead-lettered them
-- (the one owner of replaying).
-- Parameters: dead_ids  the dead letters to replay (unknown or already gone ids are skipped)
-- Returns:    setof msg_id, one per dead letter replayed.
-- Raises:     nothing.
-- Tables:     dead_letter (delete), event (insert), queue (read; an id of each one's sequence).
-- Each event is appended to its queue's current table for its consumer only (other consumers
-- handled it already), with the same msg_id and retry_count 0, in dead_id order.  The DELETE
-- locks each row: concurrent replays of one dead letter replay it once, the loser skips it.
-- Like a send, it first takes each queue's shared advisory lock and draws an id of its sequence,
-- so that the ticker's pass sees the queue has something to do (pglogq.ticker) although the
-- events keep their older ids.
CREATE OR REPLACE FUNCTION pglogq._replay(dead_ids bigint[])
RETURNS SETOF bigint LANGUAGE sql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    -- each queue's lock (the inner projection) before its id (the outer one)
    SELECT count(nextval(l.event_seq)) FROM (
        SELECT q.event_seq, pg_advisory_xact_lock_shared(hashtext('pglogq.queue'), hashtext(q.queue_name)) AS locked,
               pglogq._wake_ticker() AS woken
          FROM pglogq.queue q
         WHERE q.queue_id IN (SELECT x.queue_id FROM pglogq.dead_letter x WHERE x.dead_id = ANY (dead_ids))
         ORDER BY q.queue_id OFFSET 0) l;
    WITH d AS (
        DELETE FROM pglogq.dead_letter x WHERE x.dead_id = ANY (dead_ids) RETURNING x.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers,
                              ev_priority, ev_retry, ev_owner, ev_key, ev_partition)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers,
           d.ev_priority, 0, d.sub_id, d.ev_key, pglogq._event_partition(q.partitions, d.ev_key, d.msg_id)
      FROM d JOIN pglogq.queue q ON q.queue_id = d.queue_id
     ORDER BY d.dead_id
    RETURNING ev_id;
$$;
