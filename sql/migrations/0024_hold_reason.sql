-- 0024_hold_reason: what a nack that holds a partition's stream must keep for lookup and jobs.
--
-- On a partitioned queue a nacked event stays in its stream (strict order) instead of going to
-- the retry table, and its failed attempts are counted in pglogq.attempt.  The retry table keeps
-- a nack's reason and the time of the first failure; these columns keep the same two facts for
-- a held event, so that lookup and jobs show it as retry exactly as on a queue of one partition.
--
-- pglogq.attempt.reason    the last nack's reason (NULL: a crash, or a nack without one)
-- pglogq.attempt.first_at  when the first failed attempt the row counts happened (rows made
--                          before this migration: the time of the migration)
ALTER TABLE pglogq.attempt
    ADD COLUMN IF NOT EXISTS reason text,
    ADD COLUMN IF NOT EXISTS first_at timestamptz NOT NULL DEFAULT now();
