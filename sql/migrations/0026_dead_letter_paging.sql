-- 0026_dead_letter_paging: dead-letter pages and counts that cost what they return.
--
-- dead_letter_queue_page_idx  (queue_id, dead_id): a page of a queue's dead letters, newest or
--                             oldest first (every consumer's), read off the index in its order
--                             under the page's LIMIT; (queue_id, sub_id, dead_id) serves one
--                             consumer's.
-- dead_letter_count           the dead letters of each consumer, kept by the statement triggers
--                             of dead_letter (pglogq._dead_letter_counted, the one owner) in the
--                             transaction that adds or removes them: queue_info, consumer_info
--                             and an unfiltered dlq_count read one row per consumer instead of
--                             counting up to millions of index entries.  Filled here from the
--                             rows present.
-- No dead letter may be added or removed between the count below and the creation of the
-- triggers (triggers.sql, later in the same install transaction): one would be missed for good.
LOCK TABLE pglogq.dead_letter IN SHARE ROW EXCLUSIVE MODE;

CREATE INDEX IF NOT EXISTS dead_letter_queue_page_idx ON pglogq.dead_letter (queue_id, dead_id);

CREATE TABLE IF NOT EXISTS pglogq.dead_letter_count (
    sub_id        integer PRIMARY KEY REFERENCES pglogq.subscriber ON DELETE CASCADE,
    queue_id      integer NOT NULL,
    dead_letters  bigint NOT NULL CHECK (dead_letters >= 0)
);

INSERT INTO pglogq.dead_letter_count (sub_id, queue_id, dead_letters)
SELECT d.sub_id, min(d.queue_id), count(*) FROM pglogq.dead_letter d GROUP BY d.sub_id;
CREATE INDEX IF NOT EXISTS dead_letter_count_queue_idx ON pglogq.dead_letter_count (queue_id);
