-- 0011_cancel_handed: what cancel() needs to know which events a consumer was really handed.
--
-- A consumer is handed the events of the ticks its cursor moves through by receiving; a cursor
-- that jumps (subscribe, seek, retention) passes events without handing them.  handed_from is
-- where the consumer's current run of receiving started (NULL: at the queue's start, which is
-- what every consumer subscribed before this migration is taken to have done); handed_run keeps
-- the runs that ended at a jump, for as long as their events are stored.
ALTER TABLE pglogq.subscription ADD COLUMN IF NOT EXISTS handed_from pg_snapshot;

CREATE TABLE IF NOT EXISTS pglogq.handed_run (
    sub_id      integer NOT NULL REFERENCES pglogq.subscription ON DELETE CASCADE,
    from_snap   pg_snapshot,            -- NULL: from the queue's start
    to_snap     pg_snapshot NOT NULL,   -- events visible here and not in from_snap were handed
    ended_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS handed_run_sub_idx ON pglogq.handed_run (sub_id);
