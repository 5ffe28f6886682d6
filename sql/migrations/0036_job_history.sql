-- 0036_job_history: an insert-only outcome log per consumer (job history and results), rotated by TRUNCATE.
--
-- Until now a finished job left no trace but the consumer's cursor: lookup could say "done" and
-- nothing else (no worker, no times, no attempts, no last error), a job stopped while it ran also
-- said "done", and a handler's return value had nowhere to go.
--
-- pglogq.outcome       one row per handler run that ended (done, failed, dead, cancelled, stopped,
--                      skipped), appended by pglogq.record_outcomes in the statement that
--                      acknowledges the page, never updated: partitioned by history_slot (0..2),
--                      the history epoch (the sequence pglogq.history_epoch) modulo 3, like the
--                      ticks are by the metadata epoch.  maint_rotate_history TRUNCATEs the oldest
--                      slot when the epoch switches, so the log never piles up dead tuples, even
--                      under a held snapshot; a row lives between history_retention and 1.5 times
--                      it (the switch period is half the longest retention of any queue).
--                      sub_id is the consumer's (never a worker's): no foreign key, the rows of a
--                      dropped consumer are unreachable and leave with their slot.
-- pglogq.outcome_seq   the order of rows finished at the same time (a page's outcomes share
--                      clock values): the tie-breaker of the history's cursor.
-- queue.history_retention  how long outcomes are kept (0: the log is off for the queue)
-- queue.max_result_bytes   the largest result stored with an outcome (its jsonb size)
CREATE SEQUENCE IF NOT EXISTS pglogq.history_epoch MINVALUE 0 START 0;
CREATE SEQUENCE IF NOT EXISTS pglogq.history_epoch_time MINVALUE 0 START 0;
CREATE SEQUENCE IF NOT EXISTS pglogq.outcome_seq CACHE 1000;

ALTER TABLE pglogq.queue
    ADD COLUMN IF NOT EXISTS history_retention interval NOT NULL DEFAULT '1 day',
    ADD COLUMN IF NOT EXISTS max_result_bytes integer NOT NULL DEFAULT 65536;

CREATE TABLE IF NOT EXISTS pglogq.outcome (
    history_slot smallint NOT NULL
        DEFAULT (coalesce(pg_sequence_last_value('pglogq.history_epoch'::regclass), 0) % 3)::smallint,
    queue_id     integer NOT NULL,
    sub_id       integer NOT NULL,
    msg_id       bigint NOT NULL,
    seq          bigint NOT NULL DEFAULT nextval('pglogq.outcome_seq'),
    outcome      text NOT NULL,
    attempt      integer NOT NULL,
    worker       text,
    ev_type      text,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL,
    error        text,
    result       jsonb
) PARTITION BY LIST (history_slot);
CREATE TABLE IF NOT EXISTS pglogq.outcome_0 PARTITION OF pglogq.outcome FOR VALUES IN (0);
CREATE TABLE IF NOT EXISTS pglogq.outcome_1 PARTITION OF pglogq.outcome FOR VALUES IN (1);
CREATE TABLE IF NOT EXISTS pglogq.outcome_2 PARTITION OF pglogq.outcome FOR VALUES IN (2);
-- one event's attempts (lookup, result); a consumer's finished jobs newest first (jobs), and
-- those that did not end done (rare among many done: their own small index)
CREATE INDEX IF NOT EXISTS outcome_msg_idx ON pglogq.outcome (sub_id, msg_id);
CREATE INDEX IF NOT EXISTS outcome_time_idx ON pglogq.outcome (sub_id, finished_at, seq);
CREATE INDEX IF NOT EXISTS outcome_failed_idx ON pglogq.outcome (sub_id, outcome, finished_at, seq)
    WHERE outcome <> 'done';
