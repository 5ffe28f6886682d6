-- 0007_retention: record when the retention limit (queue.max_consumer_lag) moved a consumer.

ALTER TABLE pglogq.subscription
    ADD COLUMN skipped_events bigint NOT NULL DEFAULT 0,
    ADD COLUMN skipped_at timestamptz;
