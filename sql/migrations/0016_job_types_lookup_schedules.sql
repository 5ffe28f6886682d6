-- 0016_job_types_lookup_schedules: per-type retry settings, the index job lookup needs, schedules.
--
-- type_config: settings of one event type of a queue that override the queue's (NULL: the
-- queue's value).  retry_delay, retry_factor, retry_cap and retry_jitter are the server's retry
-- policy for the type: the nth redelivery waits retry_delay * retry_factor ^ (n - 1), at most
-- retry_cap, drawn from [d/2, d] with jitter (the same rule as pglogq.RetryPolicy).
CREATE TABLE IF NOT EXISTS pglogq.type_config (
    queue_id      integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    ev_type       text NOT NULL,
    max_retries   integer CHECK (max_retries >= 0),
    retry_delay   interval,
    retry_factor  double precision CHECK (retry_factor >= 1),
    retry_cap     interval,
    retry_jitter  boolean,
    PRIMARY KEY (queue_id, ev_type)
);

-- Job lookup by message id: a retried or replayed event is stored again under its id for one
-- consumer (ev_owner set).  Only those rows are indexed: they are few (failures), so the send
-- path pays nothing; the original row is found through the (ev_txid, ev_id) index from
-- pglogq._event_txid_floor.
CREATE INDEX IF NOT EXISTS event_owned_id_idx ON pglogq.event (ev_id) WHERE ev_owner IS NOT NULL;

-- Schedules: periodic sends made by the ticker.  next_due is the next due time not yet sent (NULL:
-- not planned yet, the ticker plans it from created_at); schedule_fire sends it and moves it on in
-- one transaction, under the row's lock, so each due time is sent at most once whatever number of
-- tickers run.  missed: what to do with due times the ticker saw more than a minute late
-- ('skip': not sent; 'catch_up': sent, oldest first).
CREATE TABLE IF NOT EXISTS pglogq.schedule (
    schedule_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id      integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    name          text NOT NULL,
    cron          text NOT NULL,
    ev_type       text,
    ev_payload    jsonb NOT NULL,
    ev_headers    jsonb,
    ev_priority   smallint NOT NULL DEFAULT 100,
    missed        text NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'catch_up')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    next_due      timestamptz,
    last_due      timestamptz,
    last_msg_id   bigint,
    sent          bigint NOT NULL DEFAULT 0,
    skipped       bigint NOT NULL DEFAULT 0,
    CONSTRAINT schedule_name_ok CHECK (name ~ '^[A-Za-z][A-Za-z0-9_.-]{0,62}$'),
    CONSTRAINT schedule_name_uq UNIQUE (queue_id, name)
);
CREATE INDEX IF NOT EXISTS schedule_due_idx ON pglogq.schedule (next_due);

-- One row per due time handled (sent or skipped): the unique key makes a second send of the same
-- due time impossible even if next_due were ever moved back.  The last 100 per schedule are kept.
CREATE TABLE IF NOT EXISTS pglogq.schedule_run (
    schedule_id   bigint NOT NULL REFERENCES pglogq.schedule ON DELETE CASCADE,
    due_at        timestamptz NOT NULL,
    msg_id        bigint,                 -- NULL: skipped (missed while no ticker ran)
    done_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, due_at)
);
