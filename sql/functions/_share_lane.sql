-- pglogq._share_lane(consumer_id, start, tried): the lane of a share consumer subscribed with
-- lanes that a worker cuts its next lease from, locked for the caller's transaction.
-- Parameters: consumer_id  the share consumer's sub_id; start  where the worker starts its round
--             of the eight lanes (its row's sub_id % 8: workers asking together start apart);
--             tried  the lanes' streams passed over already in this call
-- Returns:    the lane's sub_id: the first in the round that may have something (a batch being
--             handed out, or a tick it has not read yet) and that no other transaction holds;
--             NULL when there is none (no lanes, every lane busy or with nothing new).
-- Raises:     nothing.
-- Tables:     subscriber (read), sub_state (the lane's row locked FOR NO KEY UPDATE), tick_head
--             (read: the queue's newest tick).
-- The one owner of the choice of a lane: _share_lease asks it in its general loop, receive in
-- its short way to a lease (see receive).  A lane another worker is cutting on is passed over,
-- never waited for.  Only the lane's state row is locked (not its subscriber row): every cutter
-- locks that row, so it is what serialises the cuts of one lane.
CREATE OR REPLACE FUNCTION pglogq._share_lane(consumer_id integer, start integer, tried smallint[])
RETURNS integer LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    lane integer;
BEGIN
    SELECT st.sub_id INTO lane
      FROM pglogq.subscriber s
      JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
     WHERE s.parent_id = consumer_id AND s.stream <= -2 AND s.stream <> ALL (tried)
       AND (st.batch_id IS NOT NULL
            OR st.last_tick < coalesce((SELECT th.tick_id FROM pglogq.tick_head th WHERE th.queue_id = s.queue_id),
                                       st.last_tick + 1))
     ORDER BY (-2 - s.stream - start + 8) % 8
     LIMIT 1 FOR NO KEY UPDATE OF st SKIP LOCKED;
    RETURN lane;
END $$;
