-- 0008_side_table_vacuum: vacuum the small, churning side and metadata tables early.
--
-- Event tables are never updated or deleted from (TRUNCATE empties them; autovacuum is off on
-- them since 0001).  The side tables (retry, delayed, idempotency keys, cancellations, progress)
-- and the metadata tables (tick, subscription) see deletes and updates; with the default scale
-- factor autovacuum waits for 20 % of the table to be dead.  A fixed threshold keeps them small.

ALTER TABLE pglogq.retry SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE pglogq.delayed SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE pglogq.idempotency_key SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000);
ALTER TABLE pglogq.cancelled SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100);
ALTER TABLE pglogq.progress SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);
ALTER TABLE pglogq.tick SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
ALTER TABLE pglogq.subscription SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);
