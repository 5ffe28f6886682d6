-- 0010_batch_id: a batch id is a plain number from pglogq.batch_seq, found through a unique index.
--
-- Until 0009 a batch id was (sequence value * 2^20 + holder sub_id) and was taken apart with
-- "% 2^20": ids collided once sub ids passed 2^20 (an ack could acknowledge another consumer's
-- page) and overflowed bigint once the sequence passed 2^43.  Now the holder of a batch is the
-- subscription row whose batch_id is that id.
--
-- Open batches keep their ids across the upgrade, so a client holding one acks it as before.
-- The sequence jumps past every id the old encoding can have issued, so a new id never equals an
-- old one a client may still hold.  Open batches that share an id (possible before, once sub ids
-- passed 2^20) get new ids: an ack naming the ambiguous id is then refused (PQ009) and the
-- holder's next receive returns the same page under its new id; nothing is skipped.
DO $$
DECLARE
    s record;
    top numeric;
BEGIN
    SELECT last_value, is_called INTO s FROM pglogq.batch_seq;
    IF s.is_called THEN
        -- the largest id the old encoding can have issued: last_value * 2^20 + the largest sub_id
        top := greatest(s.last_value::numeric * 1048576 + 2147483647,
                        (SELECT coalesce(max(batch_id), 0) FROM pglogq.subscription),
                        (SELECT coalesce(max(batch_id), 0) FROM pglogq.progress));
        PERFORM setval('pglogq.batch_seq', least(top, 9223372036854775807 - 2147483648)::bigint, true);
    END IF;
END $$;

WITH shared AS (
    SELECT s.sub_id, s.batch_id AS old_id FROM pglogq.subscription s
     WHERE s.batch_id IN (SELECT x.batch_id FROM pglogq.subscription x
                           WHERE x.batch_id IS NOT NULL GROUP BY x.batch_id HAVING count(*) > 1)
), renumbered AS (
    UPDATE pglogq.subscription s SET batch_id = nextval('pglogq.batch_seq')
      FROM shared WHERE s.sub_id = shared.sub_id
    RETURNING s.sub_id, shared.old_id, s.batch_id AS new_id
)
UPDATE pglogq.progress p SET batch_id = r.new_id
  FROM renumbered r WHERE p.sub_id = r.sub_id AND p.batch_id = r.old_id;

CREATE UNIQUE INDEX subscription_batch_uq ON pglogq.subscription (batch_id) WHERE batch_id IS NOT NULL;
