-- 0001_init: the pglogq schema, version 1.
--
-- Tables only; functions live in sql/functions/ (one per file, re-applied on
-- every install and upgrade).  The hot path (send, tick, receive, ack) never
-- UPDATEs or DELETEs an event row: events are appended to one of a few
-- rotated child tables per queue and emptied with TRUNCATE.

CREATE SCHEMA IF NOT EXISTS pglogq;

CREATE TABLE pglogq.schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per queue.  Settings are columns so that they are typed and
-- validated; the rotation state changes only at rotation.
CREATE TABLE pglogq.queue (
    queue_id            integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_name          text NOT NULL UNIQUE,
    created_at          timestamptz NOT NULL DEFAULT now(),
    paused              boolean NOT NULL DEFAULT false,
    -- rotation: ntables child tables, cur_table receives new events
    ntables             smallint NOT NULL DEFAULT 3,
    cur_table           smallint NOT NULL DEFAULT 0,
    rotation_period     interval NOT NULL DEFAULT '2 hours',
    switch_time         timestamptz NOT NULL DEFAULT now(),
    switch_step1        xid8,          -- txid of the transaction that switched tables
    switch_step2        xid8,          -- txid of a later, separate transaction (step 2)
    -- ticker thresholds
    ticker_max_count    integer NOT NULL DEFAULT 500,
    ticker_max_lag      interval NOT NULL DEFAULT '0 ms',
    ticker_idle_period  interval NOT NULL DEFAULT '1 minute',
    -- consumption
    batch_max_events    integer NOT NULL DEFAULT 10000,
    big_batch_events    integer NOT NULL DEFAULT 50000,
    -- failure handling
    max_retries         integer NOT NULL DEFAULT 5,
    retry_delay         interval NOT NULL DEFAULT '10 seconds',
    max_payload_bytes   integer NOT NULL DEFAULT 1048576,
    idempotency_window  interval NOT NULL DEFAULT '1 day',
    -- coop workers: a worker silent this long loses its open batch
    dead_interval       interval NOT NULL DEFAULT '30 seconds',
    -- retention: a consumer further behind than this (0 = never) is moved forward
    max_consumer_lag    interval NOT NULL DEFAULT '0',
    event_seq           regclass,      -- per-queue sequence of message ids
    retain_tick         bigint,        -- every event committed after this tick is still stored
    CONSTRAINT queue_name_ok CHECK (queue_name ~ '^[A-Za-z][A-Za-z0-9_.-]{0,47}$')
);

-- Ticks: snapshots taken by the ticker, each in its own committed transaction.
CREATE TABLE pglogq.tick (
    queue_id        integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    tick_id         bigint NOT NULL,
    tick_time       timestamptz NOT NULL DEFAULT now(),
    tick_snapshot   pg_snapshot NOT NULL,
    tick_event_seq  bigint NOT NULL,
    PRIMARY KEY (queue_id, tick_id)
);

-- Subscriptions.  A row with parent_id NULL is a consumer (it owns the
-- cursor last_tick); a row with parent_id set is a cooperating worker of that
-- consumer.  Whichever row holds an open batch keeps its page state.
CREATE TABLE pglogq.subscription (
    sub_id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id            integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    consumer_name       text NOT NULL,
    parent_id           integer REFERENCES pglogq.subscription ON DELETE CASCADE,
    worker_name         text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_tick           bigint,                 -- consumers only: next batch starts after it
    last_seen           timestamptz,
    heartbeat_at        timestamptz,
    batch_id            bigint,
    batch_prev_tick     bigint,
    batch_cur_tick      bigint,
    batch_big           boolean,
    batch_started_at    timestamptz,
    page_prio           integer,                -- start of the unacknowledged page (NULL: batch start)
    page_txid           xid8,
    page_id             bigint,
    page_end_prio       integer,                -- end of what the last receive returned
    page_end_txid       xid8,
    page_end_id         bigint,
    page_more           boolean,                -- more events after page_end?
    CONSTRAINT consumer_name_ok CHECK (consumer_name ~ '^[A-Za-z][A-Za-z0-9_.-]{0,62}$'),
    CONSTRAINT worker_name_ok CHECK (worker_name IS NULL OR worker_name ~ '^[A-Za-z0-9_.:@-]{1,63}$')
) WITH (fillfactor = 50);

CREATE UNIQUE INDEX subscription_consumer_uq ON pglogq.subscription (queue_id, consumer_name)
    WHERE parent_id IS NULL;
CREATE UNIQUE INDEX subscription_worker_uq ON pglogq.subscription (parent_id, worker_name)
    WHERE parent_id IS NOT NULL;

-- Events: partitioned by queue, then by rotation slot.  Partitions are made
-- by create_queue().  ev_id is the message id (stable across retries);
-- ev_txid the inserting top-level transaction; ev_owner limits a retried or
-- replayed event to one consumer (NULL: every consumer).
CREATE TABLE pglogq.event (
    ev_queue     integer NOT NULL,
    ev_slot      smallint NOT NULL,
    ev_id        bigint NOT NULL,
    ev_txid      xid8 NOT NULL DEFAULT pg_current_xact_id(),
    ev_time      timestamptz NOT NULL DEFAULT now(),
    ev_type      text,
    ev_payload   jsonb NOT NULL,
    ev_headers   jsonb,
    ev_priority  smallint NOT NULL DEFAULT 100,
    ev_retry     integer NOT NULL DEFAULT 0,
    ev_owner     integer,
    ev_failed_at timestamptz       -- first failure time, for retried events
) PARTITION BY LIST (ev_queue);

CREATE INDEX event_txid_idx ON pglogq.event (ev_txid, ev_id);

-- Nacked events waiting for their retry time (one row per consumer and message).
CREATE TABLE pglogq.retry (
    queue_id     integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    sub_id       integer NOT NULL REFERENCES pglogq.subscription ON DELETE CASCADE,
    msg_id       bigint NOT NULL,
    due_at       timestamptz NOT NULL,
    retry_count  integer NOT NULL,
    ev_time      timestamptz NOT NULL,
    ev_type      text,
    ev_payload   jsonb NOT NULL,
    ev_headers   jsonb,
    ev_priority  smallint NOT NULL,
    reason       text,
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sub_id, msg_id)
);
CREATE INDEX retry_due_idx ON pglogq.retry (due_at);

-- Delayed sends waiting for deliver_at.
CREATE TABLE pglogq.delayed (
    queue_id     integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    msg_id       bigint NOT NULL,
    deliver_at   timestamptz NOT NULL,
    ev_time      timestamptz NOT NULL DEFAULT now(),
    ev_type      text,
    ev_payload   jsonb NOT NULL,
    ev_headers   jsonb,
    ev_priority  smallint NOT NULL,
    PRIMARY KEY (queue_id, msg_id)
);
CREATE INDEX delayed_due_idx ON pglogq.delayed (deliver_at);

-- Dead letters: events that failed max_retries + 1 times for one consumer.
CREATE TABLE pglogq.dead_letter (
    dead_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id         integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    sub_id           integer NOT NULL REFERENCES pglogq.subscription ON DELETE CASCADE,
    msg_id           bigint NOT NULL,
    ev_time          timestamptz NOT NULL,
    ev_type          text,
    ev_payload       jsonb NOT NULL,
    ev_headers       jsonb,
    ev_priority      smallint NOT NULL,
    retry_count      integer NOT NULL,
    reason           text,
    first_failed_at  timestamptz NOT NULL,
    failed_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letter_queue_idx ON pglogq.dead_letter (queue_id, sub_id, dead_id);
CREATE UNIQUE INDEX dead_letter_msg_uq ON pglogq.dead_letter (sub_id, msg_id);
CREATE INDEX dead_letter_time_idx ON pglogq.dead_letter (failed_at);

-- Idempotency keys: one event per (queue, key) within the queue's window.
CREATE TABLE pglogq.idempotency_key (
    queue_id    integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    idem_key    text NOT NULL,
    msg_id      bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, idem_key)
);
CREATE INDEX idempotency_key_time_idx ON pglogq.idempotency_key (created_at);

-- Cancelled events that are still in the log; receive skips them.
CREATE TABLE pglogq.cancelled (
    queue_id    integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    msg_id      bigint NOT NULL,
    ev_txid     xid8 NOT NULL,
    cancelled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, msg_id)
);

-- Progress of events being handled right now (one row per running event).
CREATE TABLE pglogq.progress (
    sub_id        integer NOT NULL REFERENCES pglogq.subscription ON DELETE CASCADE,
    batch_id      bigint NOT NULL,
    msg_id        bigint NOT NULL,
    worker        text,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    percent       numeric(5,2),
    stage         text,
    counters      jsonb,
    PRIMARY KEY (sub_id, msg_id)
) WITH (fillfactor = 50);

-- Facts about this database that the ticker checks (restore detection).
CREATE TABLE pglogq.ticker_state (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    system_id      numeric,
    max_txid_seen  xid8,
    last_run_at    timestamptz
);
INSERT INTO pglogq.ticker_state DEFAULT VALUES;

CREATE SEQUENCE pglogq.batch_seq;

-- What receive() returns, one row per event.
CREATE TYPE pglogq.message AS (
    batch_id     bigint,
    msg_id       bigint,
    type         text,
    payload      jsonb,
    headers      jsonb,
    retry_count  integer,
    created_at   timestamptz,
    priority     smallint,
    txid         xid8
);
