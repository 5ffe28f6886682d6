-- pglogq.set_share_window(queue_name, consumer_name, size): set the in-flight window of a share
-- consumer: how many events its workers may have been handed from the first event of its oldest
-- open lease on.
-- Parameters: queue_name; consumer_name  a share consumer (subscribe with share => true);
--             size  1..100000000 events, or NULL: no limit (the default)
-- Returns:    the window now in force (NULL: no limit).
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ093 not a share consumer;
--             PQ019 size out of range.  Nothing is changed when it raises.
-- Tables:     subscription (lock of the consumer row), sub_state (update of its share_window).
-- The window counts every event handed out in a lease since the oldest lease still open began:
-- the events leased now, and those done but behind that lease (see _share_lease).  While it is
-- full, receive gives the consumer's workers nothing new (an empty page), until the oldest
-- lease ends (acknowledged, or closed by seek or retention) and the window start moves to the
-- next open lease; a silent worker's lease and ceded events are taken over whatever the room.
-- A smaller window takes effect at the next lease: leases already out stay.  On a partitioned
-- queue the window has no effect: a worker's lease is a partition's page, and at most one is
-- out per partition.
CREATE OR REPLACE FUNCTION pglogq.set_share_window(queue_name text, consumer_name text, size integer)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    c pglogq.subscription;
BEGIN
    IF size < 1 OR size > 100000000 THEN
        RAISE EXCEPTION 'invalid share window %: use 1..100000000 events, or NULL for no limit', size
            USING ERRCODE = 'PQ019';
    END IF;
    q := pglogq._queue(queue_name);
    c := pglogq._consumer(q.queue_id, queue_name, consumer_name);
    SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = c.sub_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer "%" on queue "%"', consumer_name, q.queue_name USING ERRCODE = 'PQ002';
    END IF;
    IF NOT c.share THEN
        RAISE EXCEPTION 'consumer "%" on queue "%" is not a share consumer: it has no window', c.consumer_name,
            q.queue_name
            USING ERRCODE = 'PQ093',
                  HINT = 'an ordinary consumer''s workers each hold a whole batch; subscribe a share consumer (share => true)';
    END IF;
    UPDATE pglogq.sub_state s SET share_window = size WHERE s.sub_id = c.sub_id;
    RETURN size;
END $$;
