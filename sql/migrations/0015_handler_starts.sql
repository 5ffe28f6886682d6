-- 0015_handler_starts: what cancel and crash accounting need to know about handler starts.
--
-- cancel(queue, msg_id) returns true for an event no handler has started yet, also when it is in
-- a page already received.  A receiver that says so (receive(..., start_first)) marks
-- the events it starts with mark_started(); the holder row keeps the frontier: handlers have
-- started on the events of the page up to started_*.  A receiver that does not mark starts (a
-- SQL-only consumer) has its whole page counted as started when receive returns it, as before.
--
-- A page handed out again without ack (the worker was killed, lost its connection, or its batch
-- was taken over) counts a failed attempt for every event whose handler had started: the
-- counts live in pglogq.attempt while the event stays in its holder's open batch; the events
-- under suspicion (suspect_*: the end of that run) are then handed out in halved pages until the
-- event that crashes stands alone, and it goes to the dead-letter queue after max_retries + 1
-- failed attempts.
--
-- A running job can be asked to stop: pglogq.stop_request holds the request until the event is
-- gone.  Maintenance releases the batch of a worker silent for dead_interval (released_at) so
-- that any worker takes it at once.
ALTER TABLE pglogq.subscription
    ADD COLUMN IF NOT EXISTS page_marks boolean,         -- the receiver marks handler starts itself
    ADD COLUMN IF NOT EXISTS started_prio integer,       -- handlers started up to this key of the page
    ADD COLUMN IF NOT EXISTS started_txid xid8,
    ADD COLUMN IF NOT EXISTS started_id bigint,
    ADD COLUMN IF NOT EXISTS suspect_prio integer,       -- a crash happened in the run up to this key
    ADD COLUMN IF NOT EXISTS suspect_txid xid8,
    ADD COLUMN IF NOT EXISTS suspect_id bigint,
    ADD COLUMN IF NOT EXISTS released_at timestamptz;    -- maintenance released this silent worker's batch

-- pages received before this migration: all of them counts as started (what cancel assumed)
UPDATE pglogq.subscription
   SET started_prio = page_end_prio, started_txid = page_end_txid, started_id = page_end_id
 WHERE page_end_txid IS NOT NULL;

-- failed attempts without an outcome (crashes) of events of a holder's open batch
CREATE TABLE IF NOT EXISTS pglogq.attempt (
    sub_id      integer NOT NULL REFERENCES pglogq.subscription ON DELETE CASCADE,
    msg_id      bigint NOT NULL,
    ev_priority integer NOT NULL,
    ev_txid     xid8 NOT NULL,
    crashes     integer NOT NULL,
    last_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sub_id, msg_id)
);

-- "stop this running job": read by the handler through the consumer runtime
CREATE TABLE IF NOT EXISTS pglogq.stop_request (
    queue_id     integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    msg_id       bigint NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, msg_id)
);
