-- pglogq._move_cursor(sub_id, target_tick, forward_only): move a consumer's cursor by a jump
-- (seek, the retention limit) instead of by receiving: the one owner of that write.
-- Parameters: sub_id  the consumer (parent_id NULL), locked by the caller with its workers;
--             target_tick  the tick the cursor goes to; forward_only  true: never move it back
--             (the retention limit), false: go to target_tick wherever it is (seek)
-- Returns:    true when the cursor moved.
-- Raises:     nothing.
-- Tables:     sub_state (update of last_tick, the consumer's and its partitions' streams', and
--             of due_tick on a seek), stream_mark (a seek: the consumer's marks deleted;
--             handed_from through _cursor_jump), handed_run.
-- The jump is recorded first (pglogq._cursor_jump: what had been handed, for cancel), even when
-- the cursor then stays where it is.  Open batches are the caller's: close them with
-- pglogq._close_batch before or after, it reads neither last_tick nor handed_from.
CREATE OR REPLACE FUNCTION pglogq._move_cursor(sub_id integer, target_tick bigint, forward_only boolean)
RETURNS boolean LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pglogq._cursor_jump(_move_cursor.sub_id, _move_cursor.target_tick);
    -- a seek: due_tick NULL, the marks of the streams gone and a new mark_epoch (marks a receive
    -- inserts after this from what it read before count for nothing); the next receive marks the
    -- streams again from their new cursors (_stream_skip); forward (retention), the marks stay true
    IF NOT forward_only THEN
        DELETE FROM pglogq.stream_mark m WHERE m.consumer_id = _move_cursor.sub_id;
    END IF;
    UPDATE pglogq.sub_state s SET last_tick = _move_cursor.target_tick,
           due_tick = CASE WHEN forward_only THEN s.due_tick END,
           mark_epoch = CASE WHEN forward_only THEN s.mark_epoch ELSE s.mark_epoch + 1 END
     WHERE (s.sub_id = _move_cursor.sub_id
            OR s.sub_id IN (SELECT x.sub_id FROM pglogq.subscriber x
                             WHERE x.parent_id = _move_cursor.sub_id AND x.stream IS NOT NULL))
       AND (NOT forward_only OR s.last_tick < _move_cursor.target_tick);
    RETURN FOUND;
END $$;
