-- 0022_priority_index: a partial index of every queue's events sent with a priority other than
-- the default (100), on (ev_txid).
--
-- A batch's page is ordered by priority, then transaction order.  Most queues never use
-- priorities; for their batches the (ev_txid, ev_id) index already gives that order, and sorting
-- the page by priority (what _batch_page did for every batch under big_batch_events) cost about
-- as much as reading it.  With this index _batch_page learns in one probe whether a batch holds
-- an event of another priority, and reads the index order when it holds none.  An event of the
-- default priority is not in the index: sends pay one predicate test per row, nothing more.
-- New queues get the index from create_queue.
DO $$
DECLARE
    qid integer;
BEGIN
    FOR qid IN SELECT queue_id FROM pglogq.queue ORDER BY queue_id LOOP
        IF to_regclass(format('pglogq.%I', 'event_' || qid || '_prio_idx')) IS NULL THEN
            EXECUTE format('CREATE INDEX %I ON pglogq.%I (ev_txid) WHERE ev_priority <> 100',
                           'event_' || qid || '_prio_idx', 'event_' || qid);
        END IF;
    END LOOP;
END $$;
