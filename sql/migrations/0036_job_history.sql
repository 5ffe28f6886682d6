-- 0036_job_history: an insert-only outcome log per consumer (job history and results), rotated by TRUNCATE.
--
-- Until now a finished job left no trace but the consumer's cursor: lookup could say "done" and
-- nothing else (no worker, no times, no attempts, no last error), a job stopped while it ran also
-- said "done", and a handler's return value had nowhere to go.
--
-- pglogq.outcome       the outcome log.  One row per GROUP of handler runs of one page that ended
--                      alike: the common page (every event done on its first delivery, no result)
--                      is one row, whatever its size, with its events' ids and times in arrays;
--                      the rarer outcomes (failed, dead, cancelled, stopped, skipped, a redelivery)
--                      are grouped the same way by (outcome, attempt, error, type), and an event
--                      with a stored result is a row of its own.  A row per event (as a jobs table
--                      has) cost a no-op handler more than half its speed: an indexed row per event
--                      costs the server as much as handling the event.  Appended by
--                      pglogq.record_outcomes in the statement that acknowledges the page, never
--                      updated: partitioned by history_slot (0..2), the history epoch (the sequence
--                      pglogq.history_epoch) modulo 3, like the ticks are by the metadata epoch.
--                      maint_rotate_history TRUNCATEs the oldest slot when the epoch switches, so
--                      the log never piles up dead tuples, even under a held snapshot; a row lives
--                      between history_retention and 1.5 times it (the switch period is half the
--                      longest retention of any queue).  sub_id is the consumer's (never a
--                      worker's): no foreign key, the rows of a dropped consumer are unreachable
--                      and leave with their slot.
--     msg_ids          the events, in the page's order (NULL: the ids of id_range, in order: a
--                      page of one ascending run of ids, as one producer's pages are, costs no
--                      ids); started, finished: each one's start and end (unix seconds; started
--                      NULL: never ran); types: each one's type when they differ (NULL: all are
--                      ev_type)
--     id_range         [least, greatest] of msg_ids: an event's rows are found through the GiST
--                      index of the ranges that contain its id (ranges of different rows overlap:
--                      a page's ids are in commit order), then by its position in msg_ids
--     finished_from, finished_at  the earliest and latest end of the row's events: the log's
--                      order is finished_at (then seq), the time filters bound rows by both
-- pglogq.outcome_seq   the order of rows finished at the same time: the tie-breaker of the cursor.
-- queue.history_retention  how long outcomes are kept (0: the log is off for the queue)
-- queue.max_result_bytes   the largest result stored with an outcome (its jsonb size)
CREATE SEQUENCE IF NOT EXISTS pglogq.history_epoch MINVALUE 0 START 0;
CREATE SEQUENCE IF NOT EXISTS pglogq.history_epoch_time MINVALUE 0 START 0;
CREATE SEQUENCE IF NOT EXISTS pglogq.outcome_seq CACHE 100;

ALTER TABLE pglogq.queue
    ADD COLUMN IF NOT EXISTS history_retention interval NOT NULL DEFAULT '1 day',
    ADD COLUMN IF NOT EXISTS max_result_bytes integer NOT NULL DEFAULT 65536;

CREATE TABLE IF NOT EXISTS pglogq.outcome (
    history_slot  smallint NOT NULL
        DEFAULT (coalesce(pg_sequence_last_value('pglogq.history_epoch'::regclass), 0) % 3)::smallint,
    queue_id      integer NOT NULL,
    sub_id        integer NOT NULL,
    seq           bigint NOT NULL DEFAULT nextval('pglogq.outcome_seq'),
    outcome       text NOT NULL,
    attempt       integer NOT NULL,
    worker        text,
    ev_type       text,
    finished_from timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL,
    id_range      int8range NOT NULL,
    msg_ids       bigint[],
    started       double precision[],
    finished      double precision[] NOT NULL,
    types         text[],
    error         text,
    result        jsonb
) PARTITION BY LIST (history_slot);
CREATE TABLE IF NOT EXISTS pglogq.outcome_0 PARTITION OF pglogq.outcome FOR VALUES IN (0);
CREATE TABLE IF NOT EXISTS pglogq.outcome_1 PARTITION OF pglogq.outcome FOR VALUES IN (1);
CREATE TABLE IF NOT EXISTS pglogq.outcome_2 PARTITION OF pglogq.outcome FOR VALUES IN (2);
-- the arrays of a big group are stored out of line but not compressed: pglz took 70 ms for the
-- 240 kB of a page of 10,000 runs (more than the page's handling), for a log that lives a day
ALTER TABLE pglogq.outcome
    ALTER COLUMN msg_ids SET STORAGE EXTERNAL,
    ALTER COLUMN started SET STORAGE EXTERNAL,
    ALTER COLUMN finished SET STORAGE EXTERNAL,
    ALTER COLUMN types SET STORAGE EXTERNAL;
-- one event's rows (lookup, result); a consumer's finished jobs newest first (jobs), and those
-- that did not end done (rare among many done: their own small index)
CREATE INDEX IF NOT EXISTS outcome_ids_idx ON pglogq.outcome USING gist (id_range);
CREATE INDEX IF NOT EXISTS outcome_time_idx ON pglogq.outcome (sub_id, finished_at, seq);
CREATE INDEX IF NOT EXISTS outcome_failed_idx ON pglogq.outcome (sub_id, outcome, finished_at, seq)
    WHERE outcome <> 'done';
