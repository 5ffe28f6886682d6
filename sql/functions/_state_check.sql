-- pglogq._state_check(): refuse a snapshot taken before maintenance moved the holder state.
-- Parameters: none.
-- Returns:    true (the view pglogq.subscription calls it once per query, outside READ COMMITTED).
-- Raises:     40001 (serialization_failure) when a subscriber has no visible state row: the
--             transaction's snapshot predates two switches of maint_rotate_meta, whose TRUNCATE
--             of the partition the rows were moved out of is not MVCC-safe (a snapshot older than
--             one move still sees the moved-from versions).
-- Tables:     subscriber, sub_state (read).
-- Not called in READ COMMITTED, where a snapshot is at most one statement old: a statement that
-- waited for the move's lock reads the moved-from versions, which stay until the next switch.
-- Once a transaction has read sub_state it holds a lock that keeps the moves out until it ends,
-- so a check that passed stays true for the whole transaction.
CREATE OR REPLACE FUNCTION pglogq._state_check()
RETURNS boolean LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pglogq.subscriber s
                WHERE NOT EXISTS (SELECT 1 FROM pglogq.sub_state st WHERE st.sub_id = s.sub_id)) THEN
        RAISE EXCEPTION 'the consumer state was moved by maintenance after this transaction''s snapshot was taken'
            USING ERRCODE = '40001',
                  HINT = 'retry the transaction; call pglogq functions that receive or acknowledge in READ COMMITTED '
                         'transactions, or keep REPEATABLE READ transactions short';
    END IF;
    RETURN true;
END $$;
