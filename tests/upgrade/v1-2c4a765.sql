-- pglogq schema version 1 as first committed (2c4a765a515e809d7ff1dd94ecd6b174f6ed0173): migration 0001, its functions and roles.
-- Generated once from git history (tests/test_upgrade.py explains); never edit: it stands for the
-- first schema version that upgrades must start from.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('pglogq.schema'));
-- migration 0001_init
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

INSERT INTO pglogq.schema_version (version, name) VALUES (1, 'init') ON CONFLICT DO NOTHING;
-- function _batch_page.sql
-- pglogq._batch_page(...): one page of a batch, in delivery order, starting after a key.
-- Parameters: queue_id; owner  the consumer's sub_id (retried/replayed events of others are skipped);
--             prev_snap, cur_snap  the batch's tick snapshots; big  stream in (txid, id) order;
--             after_prio, after_txid, after_id  the key of the last acknowledged event (NULL: start);
--             lim  rows to return at most
-- Returns:    setof pglogq.message (batch_id NULL), ordered by priority desc, txid, id
--             (by txid, id when big).
-- Tables:     event (read), cancelled (read).
-- The events of a batch are those whose transaction is visible in cur_snap and not in prev_snap.
-- The scan is bounded to [xmax(prev), xmax(cur)) plus the xids that were running at prev, and
-- reads every child table of the queue, so a producer that wrote into an older child (an old
-- REPEATABLE READ snapshot across a rotation) is still found.
CREATE OR REPLACE FUNCTION pglogq._batch_page(
    queue_id integer, owner integer, prev_snap pg_snapshot, cur_snap pg_snapshot, big boolean,
    after_prio integer, after_txid xid8, after_id bigint, lim integer)
RETURNS SETOF pglogq.message LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    lo xid8 := pg_snapshot_xmax(prev_snap);
    hi xid8 := pg_snapshot_xmax(cur_snap);
    xip_arr xid8[] := ARRAY(SELECT x FROM pg_snapshot_xip(prev_snap) x
                             WHERE pg_visible_in_snapshot(x, cur_snap));
    any_cancel boolean := EXISTS (SELECT 1 FROM pglogq.cancelled c WHERE c.queue_id = _batch_page.queue_id);
BEGIN
    IF big THEN
        RETURN QUERY
        SELECT NULL::bigint, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry, e.ev_time,
               e.ev_priority, e.ev_txid
          FROM pglogq.event e
         WHERE e.ev_queue = _batch_page.queue_id
           AND e.ev_txid >= pg_snapshot_xmin(prev_snap) AND e.ev_txid < hi
           AND (after_txid IS NULL OR (e.ev_txid, e.ev_id) > (after_txid, after_id))
           AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
           AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
           AND (e.ev_owner IS NULL OR e.ev_owner = owner)
           AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                              WHERE c.queue_id = _batch_page.queue_id AND c.msg_id = e.ev_id))
         ORDER BY e.ev_txid, e.ev_id
         LIMIT lim;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT NULL::bigint, e.ev_id, e.ev_type, e.ev_payload, e.ev_headers, e.ev_retry, e.ev_time,
           e.ev_priority, e.ev_txid
      FROM pglogq.event e
     WHERE e.ev_queue = _batch_page.queue_id
       AND ((e.ev_txid >= lo AND e.ev_txid < hi) OR e.ev_txid = ANY (xip_arr))
       AND pg_visible_in_snapshot(e.ev_txid, cur_snap)
       AND NOT pg_visible_in_snapshot(e.ev_txid, prev_snap)
       AND (after_txid IS NULL
            OR (-e.ev_priority::integer, e.ev_txid, e.ev_id) > (-after_prio, after_txid, after_id))
       AND (e.ev_owner IS NULL OR e.ev_owner = owner)
       AND (NOT any_cancel OR NOT EXISTS (SELECT 1 FROM pglogq.cancelled c
                                          WHERE c.queue_id = _batch_page.queue_id AND c.msg_id = e.ev_id))
     ORDER BY e.ev_priority DESC, e.ev_txid, e.ev_id
     LIMIT lim;
END $$;

-- function _check_event.sql
-- pglogq._check_event(payload, type, headers, priority, max_bytes, pos): validate one event.
-- Parameters: the event's fields; max_bytes  the queue's max_payload_bytes;
--             pos  index in a batch (for the message), or NULL
-- Returns:    nothing.
-- Raises:     PQ006 payload too large; PQ007 invalid payload/type/headers; PQ019 priority out of range.
-- Tables:     none.
CREATE OR REPLACE FUNCTION pglogq._check_event(
    payload jsonb, type text, headers jsonb, priority integer, max_bytes integer, pos integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    at text := CASE WHEN pos IS NULL THEN '' ELSE format(' (batch element %s)', pos) END;
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be NULL%', at USING ERRCODE = 'PQ007';
    END IF;
    IF pg_column_size(payload) > max_bytes THEN
        RAISE EXCEPTION 'payload too large%: % bytes, the queue accepts at most %', at,
            pg_column_size(payload), max_bytes
            USING ERRCODE = 'PQ006', HINT = 'raise it with set_queue_config(queue, ''max_payload_bytes'', ...)';
    END IF;
    IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be a JSON object%, got %', at, jsonb_typeof(headers)
            USING ERRCODE = 'PQ007';
    END IF;
    IF type IS NOT NULL AND (type = '' OR octet_length(type) > 255) THEN
        RAISE EXCEPTION 'invalid event type%: must be 1 to 255 bytes', at USING ERRCODE = 'PQ007';
    END IF;
    IF priority IS NULL OR priority < 0 OR priority > 32767 THEN
        RAISE EXCEPTION 'invalid priority%: % (use 0..32767, higher first)', at, priority
            USING ERRCODE = 'PQ019';
    END IF;
END $$;

-- function _check_name.sql
-- pglogq._check_name(name, kind, max_len): validate a queue or consumer name.
-- Parameters: name  the name given by the caller
--             kind  'queue' or 'consumer' (for the message)
--             max_len  longest name accepted, in bytes
-- Returns:    the name, unchanged.
-- Raises:     PQ004 invalid name (NULL, empty, too long, not ASCII letters/digits/_.-,
--             not starting with a letter).
-- Tables:     none.
CREATE OR REPLACE FUNCTION pglogq._check_name(name text, kind text, max_len integer)
RETURNS text LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF name IS NULL OR name = '' THEN
        RAISE EXCEPTION 'invalid % name: must not be empty', kind
            USING ERRCODE = 'PQ004';
    END IF;
    IF octet_length(name) > max_len THEN
        RAISE EXCEPTION 'invalid % name "%": longer than % bytes', kind, left(name, 80), max_len
            USING ERRCODE = 'PQ004';
    END IF;
    IF name !~ '^[A-Za-z][A-Za-z0-9_.-]*$' THEN
        RAISE EXCEPTION 'invalid % name "%": use ASCII letters, digits, "_", "." and "-", starting with a letter',
            kind, left(name, 80)
            USING ERRCODE = 'PQ004';
    END IF;
    RETURN name;
END $$;

-- function _consumer.sql
-- pglogq._consumer(queue_id, queue_name, consumer_name): the consumer's subscription row.
-- Parameters: queue_id, queue_name (for the message), consumer_name
-- Returns:    pglogq.subscription row of the consumer (parent_id IS NULL).
-- Raises:     PQ002 unknown consumer.
-- Tables:     subscription (read).
CREATE OR REPLACE FUNCTION pglogq._consumer(queue_id integer, queue_name text, consumer_name text)
RETURNS pglogq.subscription LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    s pglogq.subscription;
BEGIN
    SELECT * INTO s FROM pglogq.subscription x
     WHERE x.queue_id = _consumer.queue_id AND x.consumer_name = _consumer.consumer_name
       AND x.parent_id IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer "%" on queue "%"', left(consumer_name, 80), queue_name
            USING ERRCODE = 'PQ002';
    END IF;
    RETURN s;
END $$;

-- function _due_time.sql
-- pglogq._due_time(deliver_at, delay): when a delayed send becomes deliverable.
-- Parameters: deliver_at  an absolute time, or NULL; delay  an interval >= 0, or NULL
-- Returns:    the due time, or NULL when the event is to be delivered at once.
-- Raises:     PQ011 both given, negative delay, or more than 10 years ahead.
-- Tables:     none.
CREATE OR REPLACE FUNCTION pglogq._due_time(deliver_at timestamptz, delay interval)
RETURNS timestamptz LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    due timestamptz;
BEGIN
    IF deliver_at IS NOT NULL AND delay IS NOT NULL THEN
        RAISE EXCEPTION 'give deliver_at or delay, not both' USING ERRCODE = 'PQ011';
    END IF;
    IF delay IS NOT NULL AND delay < interval '0' THEN
        RAISE EXCEPTION 'invalid delay %: must not be negative', delay USING ERRCODE = 'PQ011';
    END IF;
    due := coalesce(deliver_at, clock_timestamp() + delay);
    IF due IS NULL OR due <= clock_timestamp() THEN
        RETURN NULL;
    END IF;
    IF due > clock_timestamp() + interval '10 years' OR due = 'infinity' THEN
        RAISE EXCEPTION 'invalid delivery time %: more than 10 years ahead', due USING ERRCODE = 'PQ011';
    END IF;
    RETURN due;
END $$;

-- function _holder.sql
-- pglogq._holder(batch_id): lock and return the subscription row holding a batch.
-- Parameters: batch_id  as returned by receive
-- Returns:    the holder's subscription row, locked FOR NO KEY UPDATE.
-- Raises:     PQ008 unknown batch id; PQ009 not the holder's current batch (already
--             acknowledged, or taken over by another worker).
-- Tables:     subscription (lock).
-- A batch id is (sequence value * 2^20 + holder sub_id), so no lookup table is needed.
CREATE OR REPLACE FUNCTION pglogq._holder(batch_id bigint)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
BEGIN
    IF batch_id IS NULL OR batch_id < 1048576 THEN
        RAISE EXCEPTION 'unknown batch %', coalesce(batch_id::text, 'NULL') USING ERRCODE = 'PQ008';
    END IF;
    SELECT * INTO h FROM pglogq.subscription s WHERE s.sub_id = (_holder.batch_id % 1048576)::integer
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown batch %', batch_id USING ERRCODE = 'PQ008';
    END IF;
    IF h.batch_id IS DISTINCT FROM _holder.batch_id THEN
        RAISE EXCEPTION 'batch % is not the current batch of consumer "%"%', batch_id, h.consumer_name,
            CASE WHEN h.worker_name IS NOT NULL THEN format(' worker "%s"', h.worker_name) ELSE '' END
            USING ERRCODE = 'PQ009',
                  HINT = 'it was acknowledged already, or another worker took it over after this one fell silent';
    END IF;
    RETURN h;
END $$;

-- function _queue.sql
-- pglogq._queue(queue_name): the queue row, or an error.
-- Parameters: queue_name  the queue's name
-- Returns:    pglogq.queue row.
-- Raises:     PQ001 unknown queue (with the closest existing name as a hint).
-- Tables:     queue (read).
CREATE OR REPLACE FUNCTION pglogq._queue(queue_name text)
RETURNS pglogq.queue LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    near text;
BEGIN
    SELECT * INTO q FROM pglogq.queue WHERE queue.queue_name = _queue.queue_name;
    IF NOT FOUND THEN
        SELECT x.queue_name INTO near FROM pglogq.queue x
         WHERE lower(x.queue_name) = lower(_queue.queue_name)
            OR x.queue_name LIKE left(_queue.queue_name, 3) || '%'
         ORDER BY x.queue_name LIMIT 1;
        RAISE EXCEPTION 'unknown queue "%"', left(queue_name, 80)
            USING ERRCODE = 'PQ001',
                  HINT = CASE WHEN near IS NOT NULL THEN format('did you mean "%s"?', near) END;
    END IF;
    RETURN q;
END $$;

-- function _slowest_tick.sql
-- pglogq._slowest_tick(queue_id): the oldest tick any consumer or open batch still reads from.
-- Parameters: queue_id
-- Returns:    tick id, or NULL when the queue has no consumers.
-- Tables:     subscription (read).
CREATE OR REPLACE FUNCTION pglogq._slowest_tick(queue_id integer)
RETURNS bigint LANGUAGE sql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT min(least(s.last_tick, s.batch_prev_tick))
      FROM pglogq.subscription s
     WHERE s.queue_id = _slowest_tick.queue_id
       AND (s.parent_id IS NULL OR s.batch_prev_tick IS NOT NULL);
$$;

-- function _take_batch.sql
-- pglogq._take_batch(q, consumer_id, h): give holder h a batch (h must have none).
-- Parameters: q  the queue row; consumer_id  the consumer's sub_id; h  the holder row (the
--             consumer itself, or one of its cooperating workers), locked by the caller
-- Returns:    h with its batch fields set (not yet written), or h unchanged when no batch is ready.
-- Tables:     subscription (lock and update of the consumer row; takeover of a silent worker's
--             batch), tick (read).
-- A cooperating worker first takes over the open batch of a worker silent for longer than the
-- queue's dead_interval; otherwise the consumer's cursor moves past the new batch at once, and
-- the open batch holds its place for rotation until it is acknowledged.  Ticks are merged into
-- one batch up to about batch_max_events events.
CREATE OR REPLACE FUNCTION pglogq._take_batch(q pglogq.queue, consumer_id integer, h pglogq.subscription)
RETURNS pglogq.subscription LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    c pglogq.subscription;
    d pglogq.subscription;
    prev pglogq.tick;
    cur_id bigint;
    cur_seq bigint;
BEGIN
    IF h.parent_id IS NOT NULL THEN
        SELECT * INTO c FROM pglogq.subscription s WHERE s.sub_id = consumer_id FOR NO KEY UPDATE;
        SELECT * INTO d FROM pglogq.subscription s
         WHERE s.parent_id = consumer_id AND s.batch_id IS NOT NULL AND s.sub_id <> h.sub_id
           AND s.heartbeat_at < clock_timestamp() - q.dead_interval
         ORDER BY s.batch_id LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE pglogq.subscription s
               SET batch_id = NULL, batch_prev_tick = NULL, batch_cur_tick = NULL, batch_big = NULL,
                   batch_started_at = NULL, page_prio = NULL, page_txid = NULL, page_id = NULL,
                   page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL
             WHERE s.sub_id = d.sub_id;
            DELETE FROM pglogq.progress p WHERE p.sub_id = d.sub_id;
            RAISE NOTICE 'worker "%" took over batch % of silent worker "%" (last heartbeat %)',
                h.worker_name, d.batch_id, d.worker_name, d.heartbeat_at;
            h.batch_id := (nextval('pglogq.batch_seq') * 1048576) + h.sub_id;
            h.batch_prev_tick := d.batch_prev_tick;
            h.batch_cur_tick := d.batch_cur_tick;
            h.batch_big := d.batch_big;
            h.batch_started_at := clock_timestamp();
            h.page_prio := d.page_prio;
            h.page_txid := d.page_txid;
            h.page_id := d.page_id;
            h.page_end_prio := NULL;
            h.page_end_txid := NULL;
            h.page_end_id := NULL;
            h.page_more := NULL;
            RETURN h;
        END IF;
    ELSE
        c := h;
    END IF;
    SELECT * INTO prev FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = c.last_tick;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tick % of consumer "%" is gone', c.last_tick, c.consumer_name
            USING ERRCODE = 'PQ017', HINT = 'seek the consumer to a tick that still exists';
    END IF;
    SELECT t.tick_id INTO cur_id FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id > c.last_tick
     ORDER BY t.tick_id LIMIT 1;
    IF cur_id IS NULL THEN
        RETURN h;
    END IF;
    -- merge further ticks while the batch stays under batch_max_events (estimated from ids)
    SELECT max(t.tick_id) INTO cur_id FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id >= cur_id
       AND (t.tick_id = cur_id OR t.tick_event_seq <= prev.tick_event_seq + q.batch_max_events);
    SELECT t.tick_event_seq INTO cur_seq FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = cur_id;
    IF h.parent_id IS NOT NULL THEN
        UPDATE pglogq.subscription s SET last_tick = cur_id, last_seen = clock_timestamp()
         WHERE s.sub_id = c.sub_id;
    ELSE
        h.last_tick := cur_id;
    END IF;
    h.batch_id := (nextval('pglogq.batch_seq') * 1048576) + h.sub_id;
    h.batch_prev_tick := prev.tick_id;
    h.batch_cur_tick := cur_id;
    h.batch_big := cur_seq - prev.tick_event_seq > q.big_batch_events;
    h.batch_started_at := clock_timestamp();
    h.page_prio := NULL;
    h.page_txid := NULL;
    h.page_id := NULL;
    h.page_end_prio := NULL;
    h.page_end_txid := NULL;
    h.page_end_id := NULL;
    h.page_more := NULL;
    RETURN h;
END $$;

-- function _tick.sql
-- pglogq._tick(queue_id, force): write the next tick of one queue if its thresholds say so.
-- Parameters: queue_id; force  tick whatever the thresholds say (and wait for a concurrent ticker)
-- Returns:    the new tick id, or NULL when no tick was due (or another ticker holds the queue).
-- Raises:     PQ015 the new snapshot is older than the last tick's (txids went backwards:
--             a database restored into another cluster).
-- Tables:     tick (insert), event (probe for committed, unticked events).
-- Ticks of one queue are serialised by a transaction advisory lock, so a tick's snapshot is
-- never older than its predecessor's.  The ticking transaction's own xid is marked as running
-- in the snapshot, so events it sent itself are never in a batch before it commits.
CREATE OR REPLACE FUNCTION pglogq._tick(queue_id integer, force boolean)
RETURNS bigint LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    last pglogq.tick;
    snap pg_snapshot;
    me xid8;
    cur_seq bigint;
    pending boolean;
    xips text;
    xip_arr xid8[];
BEGIN
    IF force THEN
        PERFORM pg_advisory_xact_lock(hashtext('pglogq.tick'), _tick.queue_id);
    ELSIF NOT pg_try_advisory_xact_lock(hashtext('pglogq.tick'), _tick.queue_id) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = _tick.queue_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT * INTO last FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
    cur_seq := coalesce(pg_sequence_last_value(q.event_seq), 0);
    IF NOT force THEN
        -- committed events not yet covered by the last tick?  (uncommitted ones are invisible here)
        xip_arr := ARRAY(SELECT pg_snapshot_xip(last.tick_snapshot));
        pending := EXISTS (SELECT 1 FROM pglogq.event e
                            WHERE e.ev_queue = q.queue_id
                              AND e.ev_txid >= pg_snapshot_xmax(last.tick_snapshot))
                   OR (cardinality(xip_arr) > 0
                       AND EXISTS (SELECT 1 FROM pglogq.event e
                                    WHERE e.ev_queue = q.queue_id AND e.ev_txid = ANY (xip_arr)));
        IF NOT ((pending AND (cur_seq - last.tick_event_seq >= q.ticker_max_count
                              OR clock_timestamp() - last.tick_time >= q.ticker_max_lag))
                OR clock_timestamp() - last.tick_time >= q.ticker_idle_period) THEN
            RETURN NULL;
        END IF;
    END IF;
    me := pg_current_xact_id();
    snap := pg_current_snapshot();
    IF pg_visible_in_snapshot(me, snap) THEN
        -- our own xid is visible to ourselves; mark it running for everybody else
        SELECT string_agg(x::text, ',' ORDER BY x) INTO xips
          FROM (SELECT pg_snapshot_xip(snap) AS x UNION SELECT me) s;
        snap := format('%s:%s:%s', least(pg_snapshot_xmin(snap), me), pg_snapshot_xmax(snap), xips)::pg_snapshot;
    END IF;
    IF pg_snapshot_xmax(snap) < pg_snapshot_xmax(last.tick_snapshot) THEN
        RAISE EXCEPTION 'transaction ids went backwards on queue "%" (last tick xmax %, now %)',
            q.queue_name, pg_snapshot_xmax(last.tick_snapshot), pg_snapshot_xmax(snap)
            USING ERRCODE = 'PQ015',
                  HINT = 'this database looks restored into another cluster; ticking would mis-batch events. '
                         'Recreate the queues (or run pglogq.reset_after_restore()) before ticking.';
    END IF;
    INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq)
    VALUES (q.queue_id, last.tick_id + 1, clock_timestamp(), snap, cur_seq);
    PERFORM pg_notify('pglogq.' || q.queue_name, (last.tick_id + 1)::text);
    RETURN last.tick_id + 1;
END $$;

-- function ack.sql
-- pglogq.ack(batch_id): acknowledge the page that receive returned last.
-- Parameters: batch_id  from receive
-- Returns:    true; false when receive has returned nothing of this batch yet.
-- Raises:     PQ008 unknown batch; PQ009 not the current batch of its consumer/worker.
-- Tables:     subscription (update), progress (rows of the batch removed when it is finished).
-- When the acknowledged page was the last of the batch, the batch is finished and the next
-- receive starts the next one; otherwise the next receive returns the next page.
CREATE OR REPLACE FUNCTION pglogq.ack(batch_id bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
BEGIN
    h := pglogq._holder(batch_id);
    IF h.page_end_txid IS NULL THEN
        RETURN false;
    END IF;
    IF h.page_more THEN
        UPDATE pglogq.subscription s
           SET page_prio = h.page_end_prio, page_txid = h.page_end_txid, page_id = h.page_end_id,
               page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL,
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp()
         WHERE s.sub_id = h.sub_id;
    ELSE
        UPDATE pglogq.subscription s
           SET batch_id = NULL, batch_prev_tick = NULL, batch_cur_tick = NULL, batch_big = NULL,
               batch_started_at = NULL, page_prio = NULL, page_txid = NULL, page_id = NULL,
               page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL, page_more = NULL,
               heartbeat_at = clock_timestamp(), last_seen = clock_timestamp()
         WHERE s.sub_id = h.sub_id;
    END IF;
    DELETE FROM pglogq.progress p WHERE p.sub_id = h.sub_id AND p.batch_id = ack.batch_id;
    RETURN true;
END $$;

-- function consumer_info.sql
-- pglogq.consumer_info(for_queue, for_consumer): one row per consumer for monitoring.
-- Parameters: for_queue, for_consumer  names, NULL for all
-- Returns:    queue_name, consumer_name, last_tick, lag (time since the oldest event it has not
--             passed was ticked; 0 when caught up), lag_events (estimated events not yet passed),
--             pending_events (estimate, including the open batch), last_seen, batch_id (of the
--             consumer itself), batch_open_since, workers, open_batches, retry_depth, dead_letters.
-- Tables:     subscription, tick, retry, dead_letter (read).
CREATE OR REPLACE FUNCTION pglogq.consumer_info(for_queue text DEFAULT NULL, for_consumer text DEFAULT NULL)
RETURNS TABLE (queue_name text, consumer_name text, last_tick bigint, lag interval, lag_events bigint,
               pending_events bigint, last_seen timestamptz, batch_id bigint, batch_open_since timestamptz,
               workers integer, open_batches integer, retry_depth bigint, dead_letters bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT q.queue_name, s.consumer_name, s.last_tick,
           CASE WHEN lt.tick_id > pos.tick_id THEN clock_timestamp() - nxt.tick_time ELSE interval '0' END,
           greatest(lt.tick_event_seq - cur.tick_event_seq, 0),
           greatest(lt.tick_event_seq - pos.tick_event_seq, 0),
           greatest(s.last_seen, (SELECT max(w.last_seen) FROM pglogq.subscription w WHERE w.parent_id = s.sub_id)),
           s.batch_id, s.batch_started_at,
           (SELECT count(*)::integer FROM pglogq.subscription w WHERE w.parent_id = s.sub_id),
           (SELECT count(*)::integer FROM pglogq.subscription w
             WHERE (w.parent_id = s.sub_id OR w.sub_id = s.sub_id) AND w.batch_id IS NOT NULL),
           (SELECT count(*) FROM pglogq.retry r WHERE r.sub_id = s.sub_id),
           (SELECT count(*) FROM pglogq.dead_letter d WHERE d.sub_id = s.sub_id)
      FROM pglogq.subscription s
      JOIN pglogq.queue q ON q.queue_id = s.queue_id
      LEFT JOIN LATERAL (SELECT * FROM pglogq.tick t WHERE t.queue_id = q.queue_id
                          ORDER BY t.tick_id DESC LIMIT 1) lt ON true
      LEFT JOIN pglogq.tick cur ON cur.queue_id = q.queue_id AND cur.tick_id = s.last_tick
      LEFT JOIN LATERAL (SELECT * FROM pglogq.tick t WHERE t.queue_id = q.queue_id
                          AND t.tick_id = coalesce(
                              (SELECT min(w.batch_prev_tick) FROM pglogq.subscription w
                                WHERE w.parent_id = s.sub_id OR w.sub_id = s.sub_id), s.last_tick)) pos ON true
      LEFT JOIN LATERAL (SELECT * FROM pglogq.tick t WHERE t.queue_id = q.queue_id
                          AND t.tick_id > pos.tick_id ORDER BY t.tick_id LIMIT 1) nxt ON true
     WHERE s.parent_id IS NULL
       AND (consumer_info.for_queue IS NULL OR q.queue_name = consumer_info.for_queue)
       AND (consumer_info.for_consumer IS NULL OR s.consumer_name = consumer_info.for_consumer)
     ORDER BY q.queue_name, s.consumer_name;
$$;

-- function create_queue.sql
-- pglogq.create_queue(queue_name): create a queue with its rotated event tables.
-- Parameters: queue_name  ASCII name, letters/digits/_.-, at most 48 bytes
-- Returns:    true if created, false if it already existed (nothing changed).
-- Raises:     PQ004 invalid name.
-- Tables:     queue, tick, event partitions (created), a per-queue id sequence.
-- Concurrency: racing creators of one name serialise on an advisory lock; one wins.
CREATE OR REPLACE FUNCTION pglogq.create_queue(queue_name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    n integer;
    qtab text;
BEGIN
    PERFORM pglogq._check_name(queue_name, 'queue', 48);
    -- one registration at a time: no deadlock between racing creators
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    IF EXISTS (SELECT 1 FROM pglogq.queue x WHERE x.queue_name = create_queue.queue_name) THEN
        RETURN false;
    END IF;
    INSERT INTO pglogq.queue (queue_name) VALUES (create_queue.queue_name) RETURNING * INTO q;
    qtab := 'event_' || q.queue_id;
    EXECUTE format('CREATE SEQUENCE pglogq.%I', qtab || '_seq');
    EXECUTE format('CREATE TABLE pglogq.%I PARTITION OF pglogq.event FOR VALUES IN (%s) PARTITION BY LIST (ev_slot)',
                   qtab, q.queue_id);
    FOR n IN 0 .. q.ntables - 1 LOOP
        EXECUTE format('CREATE TABLE pglogq.%I PARTITION OF pglogq.%I FOR VALUES IN (%s)'
                       ' WITH (autovacuum_enabled = false)',
                       qtab || '_' || n, qtab, n);
    END LOOP;
    UPDATE pglogq.queue SET event_seq = format('pglogq.%I', qtab || '_seq')::regclass,
                            switch_step1 = pg_current_xact_id(), switch_step2 = pg_current_xact_id()
     WHERE queue_id = q.queue_id;
    -- tick 1: the starting point of every consumer that subscribes before the first event
    INSERT INTO pglogq.tick (queue_id, tick_id, tick_snapshot, tick_event_seq)
    VALUES (q.queue_id, 1, pg_current_snapshot(), 0);
    UPDATE pglogq.queue SET retain_tick = 1 WHERE queue_id = q.queue_id;
    RETURN true;
END $$;

-- function drop_queue.sql
-- pglogq.drop_queue(queue_name, force): drop a queue, its events and everything about it.
-- Parameters: queue_name; force  drop even if consumers are subscribed or events are stored
-- Returns:    true if dropped, false if there was no such queue.
-- Raises:     PQ004 invalid name; PQ013 queue still has consumers (without force).
-- Tables:     queue and everything referencing it (cascade), event partitions (dropped).
CREATE OR REPLACE FUNCTION pglogq.drop_queue(queue_name text, force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    nsub integer;
BEGIN
    PERFORM pglogq._check_name(queue_name, 'queue', 48);
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_name = drop_queue.queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT count(*) INTO nsub FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL;
    IF nsub > 0 AND NOT coalesce(force, false) THEN
        RAISE EXCEPTION 'queue "%" still has % consumer(s)', q.queue_name, nsub
            USING ERRCODE = 'PQ013', HINT = 'unsubscribe them first, or pass force => true';
    END IF;
    EXECUTE format('DROP TABLE pglogq.%I', 'event_' || q.queue_id);
    EXECUTE format('DROP SEQUENCE pglogq.%I', 'event_' || q.queue_id || '_seq');
    DELETE FROM pglogq.queue WHERE queue_id = q.queue_id;
    RETURN true;
END $$;

-- function force_tick.sql
-- pglogq.force_tick(queue_name): write a tick of one queue now, whatever its thresholds.
-- Parameters: queue_name
-- Returns:    the new tick id.
-- Raises:     PQ001 unknown queue; PQ014 not in READ COMMITTED; PQ015 txids went backwards.
-- Tables:     tick (insert).  Waits for a concurrent ticker of the same queue.
CREATE OR REPLACE FUNCTION pglogq.force_tick(queue_name text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the ticker must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    RETURN pglogq._tick((pglogq._queue(queue_name)).queue_id, true);
END $$;

-- function maint_operations.sql
-- pglogq.maint_operations(): the maintenance steps due now, for a ticker daemon to run.
-- Parameters: none.
-- Returns:    rows (op, queue_name): op is one of pump, rotate_step1, rotate_step2, prune;
--             run each with pglogq.maint_run(op, queue_name), each in its own transaction.
-- Tables:     queue, retry, delayed (read).
-- The policy lives here, with the schema, so the daemon (or pg_cron) stays dumb.
CREATE OR REPLACE FUNCTION pglogq.maint_operations()
RETURNS TABLE (op text, queue_name text) LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT 'pump', NULL::text
     WHERE EXISTS (SELECT 1 FROM pglogq.retry r WHERE r.due_at <= clock_timestamp())
        OR EXISTS (SELECT 1 FROM pglogq.delayed d WHERE d.deliver_at <= clock_timestamp())
    UNION ALL
    SELECT 'rotate_step2', q.queue_name FROM pglogq.queue q WHERE q.switch_step2 IS NULL
    UNION ALL
    SELECT 'rotate_step1', q.queue_name FROM pglogq.queue q
     WHERE q.switch_step2 IS NOT NULL AND clock_timestamp() - q.switch_time >= q.rotation_period
    UNION ALL
    SELECT 'prune', q.queue_name FROM pglogq.queue q;
$$;

-- function maint_prune.sql
-- pglogq.maint_prune(queue_name): remove what no consumer can need any more.
-- Parameters: queue_name
-- Returns:    the number of rows removed.
-- Raises:     PQ001 unknown queue.
-- Tables:     tick, idempotency_key, cancelled, progress, subscription (delete).
-- Keeps every tick from the slowest consumer on, and before it one tick a minute back to the
-- oldest tick whose events are all still stored (retain_tick), so consumers can seek there.
CREATE OR REPLACE FUNCTION pglogq.maint_prune(queue_name text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    slow bigint;
    slow_snap pg_snapshot;
    keep_from bigint;
    n integer;
    total integer := 0;
BEGIN
    q := pglogq._queue(queue_name);
    slow := pglogq._slowest_tick(q.queue_id);
    SELECT max(t.tick_id) INTO keep_from FROM pglogq.tick t WHERE t.queue_id = q.queue_id;
    slow := coalesce(slow, keep_from);
    keep_from := least(coalesce(q.retain_tick, slow), slow);
    DELETE FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id < keep_from;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id > keep_from AND t.tick_id < slow
       AND t.tick_id NOT IN (SELECT min(x.tick_id) FROM pglogq.tick x
                              WHERE x.queue_id = q.queue_id AND x.tick_id > keep_from AND x.tick_id < slow
                              GROUP BY date_trunc('minute', x.tick_time));
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM pglogq.idempotency_key k
     WHERE k.queue_id = q.queue_id AND k.created_at < now() - q.idempotency_window;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    SELECT t.tick_snapshot INTO slow_snap FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = slow;
    DELETE FROM pglogq.cancelled c
     WHERE c.queue_id = q.queue_id AND pg_visible_in_snapshot(c.ev_txid, slow_snap)
       AND NOT EXISTS (SELECT 1 FROM pglogq.delayed d WHERE d.queue_id = c.queue_id AND d.msg_id = c.msg_id);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM pglogq.progress p USING pglogq.subscription s
     WHERE s.sub_id = p.sub_id AND s.queue_id = q.queue_id AND s.batch_id IS DISTINCT FROM p.batch_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    -- workers gone for a day, with no batch
    DELETE FROM pglogq.subscription s
     WHERE s.queue_id = q.queue_id AND s.parent_id IS NOT NULL AND s.batch_id IS NULL
       AND s.last_seen < now() - interval '1 day';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN total + n;
END $$;

-- function maint_pump.sql
-- pglogq.maint_pump(): move every due retry and delayed event into its queue's current table.
-- Parameters: none.
-- Returns:    the number of events moved.
-- Tables:     retry, delayed (delete of due rows), event (insert).
-- Set-based: all due rows in one statement each.  Concurrent pumps move each row once (the
-- DELETE ... RETURNING locks it).  A retried event keeps its msg_id and goes to its consumer only.
CREATE OR REPLACE FUNCTION pglogq.maint_pump()
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n1 integer;
    n2 integer;
BEGIN
    WITH due AS (
        DELETE FROM pglogq.retry r WHERE r.due_at <= clock_timestamp() RETURNING r.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers,
                              ev_priority, ev_retry, ev_owner, ev_failed_at)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers,
           d.ev_priority, d.retry_count, d.sub_id, d.first_failed_at
      FROM due d JOIN pglogq.queue q ON q.queue_id = d.queue_id;
    GET DIAGNOSTICS n1 = ROW_COUNT;
    WITH due AS (
        DELETE FROM pglogq.delayed r WHERE r.deliver_at <= clock_timestamp() RETURNING r.*
    )
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_time, ev_type, ev_payload, ev_headers, ev_priority)
    SELECT d.queue_id, q.cur_table, d.msg_id, d.ev_time, d.ev_type, d.ev_payload, d.ev_headers, d.ev_priority
      FROM due d JOIN pglogq.queue q ON q.queue_id = d.queue_id;
    GET DIAGNOSTICS n2 = ROW_COUNT;
    RETURN n1 + n2;
END $$;

-- function maint_rotate_step1.sql
-- pglogq.maint_rotate_step1(queue_name, force): empty the oldest event table and make it current.
-- Parameters: queue_name; force  rotate now even if rotation_period has not passed
-- Returns:    true if rotated; false if not due or not safe yet (then nothing changed).
-- Raises:     PQ001 unknown queue.
-- Tables:     queue (update), the oldest event child (LOCK NOWAIT, TRUNCATE).
-- Safe only when (a) step 2 of the previous rotation ran, in a later transaction; (b) every
-- consumer's position is past it; (c) the table can be locked at once (a pg_dump may hold it);
-- and (d), checked under that lock, no row in it is still unread by the slowest consumer.
-- (d) makes rotation exact even for a REPEATABLE READ producer that wrote into an old table.
CREATE OR REPLACE FUNCTION pglogq.maint_rotate_step1(queue_name text, force boolean DEFAULT false)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    slow bigint;
    slow_snap pg_snapshot;
    nxt smallint;
    tab text;
    unread boolean;
BEGIN
    q := pglogq._queue(queue_name);
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = q.queue_id FOR NO KEY UPDATE;
    IF q.switch_step2 IS NULL THEN
        RETURN false;
    END IF;
    IF NOT coalesce(force, false) AND clock_timestamp() - q.switch_time < q.rotation_period THEN
        RETURN false;
    END IF;
    slow := pglogq._slowest_tick(q.queue_id);
    IF slow IS NOT NULL THEN
        SELECT t.tick_snapshot INTO slow_snap FROM pglogq.tick t WHERE t.queue_id = q.queue_id AND t.tick_id = slow;
        IF pg_snapshot_xmin(slow_snap) <= q.switch_step2 THEN
            RETURN false;
        END IF;
    END IF;
    nxt := (q.cur_table + 1) % q.ntables;
    tab := format('pglogq.%I', 'event_' || q.queue_id || '_' || nxt);
    BEGIN
        EXECUTE 'LOCK TABLE ' || tab || ' IN ACCESS EXCLUSIVE MODE NOWAIT';
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    IF slow IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM ' || tab || ' e WHERE e.ev_txid >= pg_snapshot_xmin($1)'
                || ' AND NOT pg_visible_in_snapshot(e.ev_txid, $1))'
           INTO unread USING slow_snap;
        IF unread THEN
            RETURN false;
        END IF;
    END IF;
    EXECUTE 'TRUNCATE ' || tab;
    UPDATE pglogq.queue x
       SET cur_table = nxt, switch_time = clock_timestamp(), switch_step1 = pg_current_xact_id(),
           switch_step2 = NULL, retain_tick = coalesce(slow, (SELECT max(tick_id) FROM pglogq.tick t
                                                               WHERE t.queue_id = q.queue_id))
     WHERE x.queue_id = q.queue_id;
    RETURN true;
END $$;

-- function maint_rotate_step2.sql
-- pglogq.maint_rotate_step2(queue_name): record that a transaction after the switch has begun.
-- Parameters: queue_name
-- Returns:    true if recorded, false if there was nothing to record.
-- Raises:     PQ001 unknown queue; PQ014 called in the same transaction as step 1.
-- Tables:     queue (update).
-- Must run in its own transaction after step 1 committed; the next rotation waits until every
-- consumer is past this transaction id.
CREATE OR REPLACE FUNCTION pglogq.maint_rotate_step2(queue_name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    q := pglogq._queue(queue_name);
    IF q.switch_step2 IS NOT NULL THEN
        RETURN false;
    END IF;
    IF q.switch_step1 = pg_current_xact_id() THEN
        RAISE EXCEPTION 'rotation step 2 must run in a later transaction than step 1'
            USING ERRCODE = 'PQ014';
    END IF;
    UPDATE pglogq.queue x SET switch_step2 = pg_current_xact_id()
     WHERE x.queue_id = q.queue_id AND x.switch_step2 IS NULL;
    RETURN FOUND;
END $$;

-- function maint_run.sql
-- pglogq.maint_run(op, queue_name): run one maintenance step named by maint_operations().
-- Parameters: op  pump | rotate_step1 | rotate_step2 | prune; queue_name (NULL for pump)
-- Returns:    what the step returns, as an integer (booleans as 0/1).
-- Raises:     PQ019 unknown op; PQ001 unknown queue.
-- Tables:     as the step.  Only these fixed functions can run; no name is ever looked up.
CREATE OR REPLACE FUNCTION pglogq.maint_run(op text, queue_name text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    CASE op
        WHEN 'pump' THEN RETURN pglogq.maint_pump();
        WHEN 'rotate_step1' THEN RETURN pglogq.maint_rotate_step1(queue_name)::integer;
        WHEN 'rotate_step2' THEN RETURN pglogq.maint_rotate_step2(queue_name)::integer;
        WHEN 'prune' THEN RETURN pglogq.maint_prune(queue_name);
        ELSE
            RAISE EXCEPTION 'unknown maintenance operation "%"', left(coalesce(op, 'NULL'), 80)
                USING ERRCODE = 'PQ019';
    END CASE;
END $$;

-- function nack.sql
-- pglogq.nack(batch_id, msg_id, retry_after, reason, msg_txid): this consumer failed an event.
-- Parameters: batch_id; msg_id  an event of the page receive returned last;
--             retry_after  when to deliver it again, 0..1 year (default: the queue's retry_delay);
--             reason  free text kept with the event (last 2000 bytes);
--             msg_txid  the message's txid from receive: makes the lookup O(1) (optional)
-- Returns:    'retry' (it comes back to this consumer only, with retry_count + 1 and the same
--             msg_id), or 'dead' (it had been redelivered max_retries times: moved to the
--             dead-letter queue).  Acknowledge the batch afterwards as usual.
-- Raises:     PQ008/PQ009 unknown or stale batch; PQ010 the event is not in the returned page;
--             PQ011 invalid retry_after.
-- Tables:     event (read), retry or dead_letter (insert).  Nacking one event twice in a page is a no-op.
CREATE OR REPLACE FUNCTION pglogq.nack(
    batch_id bigint, msg_id bigint, retry_after interval DEFAULT NULL, reason text DEFAULT NULL,
    msg_txid xid8 DEFAULT NULL)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    h pglogq.subscription;
    q pglogq.queue;
    owner integer;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    e pglogq.event;
    delay interval;
BEGIN
    h := pglogq._holder(batch_id);
    SELECT * INTO q FROM pglogq.queue x WHERE x.queue_id = h.queue_id;
    delay := coalesce(retry_after, q.retry_delay);
    IF delay < interval '0' OR delay > interval '1 year' THEN
        RAISE EXCEPTION 'invalid retry_after %: use 0 .. 1 year', delay USING ERRCODE = 'PQ011';
    END IF;
    owner := coalesce(h.parent_id, h.sub_id);
    SELECT t.tick_snapshot INTO prev_snap FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id = h.batch_prev_tick;
    SELECT t.tick_snapshot INTO cur_snap FROM pglogq.tick t
     WHERE t.queue_id = q.queue_id AND t.tick_id = h.batch_cur_tick;
    SELECT * INTO e FROM pglogq.event x
     WHERE x.ev_queue = q.queue_id AND x.ev_id = nack.msg_id
       AND (nack.msg_txid IS NULL OR x.ev_txid = nack.msg_txid)
       AND x.ev_txid >= pg_snapshot_xmin(prev_snap) AND x.ev_txid < pg_snapshot_xmax(cur_snap)
       AND pg_visible_in_snapshot(x.ev_txid, cur_snap) AND NOT pg_visible_in_snapshot(x.ev_txid, prev_snap)
       AND (x.ev_owner IS NULL OR x.ev_owner = owner)
       AND h.page_end_txid IS NOT NULL
       AND (h.page_txid IS NULL OR
            CASE WHEN h.batch_big THEN (x.ev_txid, x.ev_id) > (h.page_txid, h.page_id)
                 ELSE (-x.ev_priority::integer, x.ev_txid, x.ev_id) > (-h.page_prio, h.page_txid, h.page_id) END)
       AND CASE WHEN h.batch_big THEN (x.ev_txid, x.ev_id) <= (h.page_end_txid, h.page_end_id)
                ELSE (-x.ev_priority::integer, x.ev_txid, x.ev_id) <= (-h.page_end_prio, h.page_end_txid, h.page_end_id) END
     LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % is not in the page of batch % that receive returned', msg_id, batch_id
            USING ERRCODE = 'PQ010';
    END IF;
    reason := right(reason, 2000);
    IF e.ev_retry >= q.max_retries THEN
        INSERT INTO pglogq.dead_letter (queue_id, sub_id, msg_id, ev_time, ev_type, ev_payload, ev_headers,
                                        ev_priority, retry_count, reason, first_failed_at)
        VALUES (q.queue_id, owner, e.ev_id, e.ev_time, e.ev_type, e.ev_payload, e.ev_headers,
                e.ev_priority, e.ev_retry, reason, coalesce(e.ev_failed_at, clock_timestamp()))
        ON CONFLICT (sub_id, msg_id) DO NOTHING;
        RETURN 'dead';
    END IF;
    INSERT INTO pglogq.retry (queue_id, sub_id, msg_id, due_at, retry_count, ev_time, ev_type, ev_payload,
                              ev_headers, ev_priority, reason, first_failed_at)
    VALUES (q.queue_id, owner, e.ev_id, clock_timestamp() + delay, e.ev_retry + 1, e.ev_time, e.ev_type,
            e.ev_payload, e.ev_headers, e.ev_priority, reason, coalesce(e.ev_failed_at, clock_timestamp()))
    ON CONFLICT (sub_id, msg_id) DO NOTHING;
    RETURN 'retry';
END $$;

-- function queue_info.sql
-- pglogq.queue_info(for_queue): one row per queue (or one queue) for monitoring.
-- Parameters: for_queue  a queue name, NULL for all queues
-- Returns:    queue_name, paused, last_tick_id, last_tick_time, last_tick_age, ticker_lag
--             (age of the oldest committed event not yet ticked: 0 when none), events_per_second
--             (over the last minute of ticks), pending_estimate (events sent since the last tick),
--             consumers, retry_depth, dead_letters, delayed, size_bytes, rotation_period,
--             last_rotation, rotation_blocked_by (the consumer holding rotation back, if any).
-- Tables:     queue, tick, subscription, retry, dead_letter, delayed, event (read).
CREATE OR REPLACE FUNCTION pglogq.queue_info(for_queue text DEFAULT NULL)
RETURNS TABLE (queue_name text, paused boolean, last_tick_id bigint, last_tick_time timestamptz,
               last_tick_age interval, ticker_lag interval, events_per_second double precision,
               pending_estimate bigint, consumers integer, retry_depth bigint, dead_letters bigint,
               delayed bigint, size_bytes bigint, rotation_period interval, last_rotation timestamptz,
               rotation_blocked_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    lt pglogq.tick;
    old pglogq.tick;
    slow bigint;
BEGIN
    IF queue_info.for_queue IS NOT NULL THEN
        PERFORM pglogq._queue(queue_info.for_queue);
    END IF;
    FOR q IN SELECT * FROM pglogq.queue x
              WHERE queue_info.for_queue IS NULL OR x.queue_name = queue_info.for_queue
              ORDER BY x.queue_name LOOP
        SELECT * INTO lt FROM pglogq.tick t WHERE t.queue_id = q.queue_id ORDER BY t.tick_id DESC LIMIT 1;
        SELECT * INTO old FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_time >= lt.tick_time - interval '1 minute'
         ORDER BY t.tick_id LIMIT 1;
        queue_name := q.queue_name;
        paused := q.paused;
        last_tick_id := lt.tick_id;
        last_tick_time := lt.tick_time;
        last_tick_age := clock_timestamp() - lt.tick_time;
        SELECT clock_timestamp() - min(e.ev_time) INTO ticker_lag FROM pglogq.event e
         WHERE e.ev_queue = q.queue_id AND e.ev_txid >= pg_snapshot_xmax(lt.tick_snapshot);
        ticker_lag := coalesce(ticker_lag, interval '0');
        events_per_second := CASE WHEN lt.tick_time > old.tick_time
            THEN (lt.tick_event_seq - old.tick_event_seq)
                 / extract(epoch FROM lt.tick_time - old.tick_time)::double precision
            ELSE 0 END;
        pending_estimate := greatest(coalesce(pg_sequence_last_value(q.event_seq), 0) - lt.tick_event_seq, 0);
        SELECT count(*) INTO consumers FROM pglogq.subscription s WHERE s.queue_id = q.queue_id AND s.parent_id IS NULL;
        SELECT count(*) INTO retry_depth FROM pglogq.retry r WHERE r.queue_id = q.queue_id;
        SELECT count(*) INTO dead_letters FROM pglogq.dead_letter d WHERE d.queue_id = q.queue_id;
        SELECT count(*) INTO delayed FROM pglogq.delayed d WHERE d.queue_id = q.queue_id;
        SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) INTO size_bytes
          FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
         WHERE p.relname = 'event_' || q.queue_id AND p.relnamespace = 'pglogq'::regnamespace;
        rotation_period := q.rotation_period;
        last_rotation := q.switch_time;
        rotation_blocked_by := NULL;
        slow := pglogq._slowest_tick(q.queue_id);
        IF slow IS NOT NULL AND clock_timestamp() - q.switch_time > q.rotation_period * 2 THEN
            SELECT format('consumer %s (at tick %s, %s behind)', s.consumer_name, slow,
                          date_trunc('second', clock_timestamp() - t.tick_time))
              INTO rotation_blocked_by
              FROM pglogq.subscription s JOIN pglogq.tick t ON t.queue_id = s.queue_id AND t.tick_id = slow
             WHERE s.queue_id = q.queue_id AND least(s.last_tick, s.batch_prev_tick) = slow
             LIMIT 1;
            IF rotation_blocked_by IS NULL OR clock_timestamp() - (SELECT t.tick_time FROM pglogq.tick t
                    WHERE t.queue_id = q.queue_id AND t.tick_id = slow) < q.rotation_period THEN
                rotation_blocked_by := coalesce(
                    (SELECT format('transaction of pid %s open since %s', a.pid, date_trunc('second', a.xact_start))
                       FROM pg_stat_activity a WHERE a.backend_xmin IS NOT NULL
                      ORDER BY a.xact_start LIMIT 1),
                    rotation_blocked_by);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;

-- function receive.sql
-- pglogq.receive(queue_name, consumer_name, max_messages, worker_name): the consumer's current
-- batch, one page at a time.
-- Parameters: queue_name; consumer_name; max_messages  page size, 1..100000 (default 100);
--             worker_name  set it to run as one of several cooperating workers of the consumer
--             (each worker gets different batches; a silent worker's batch is taken over)
-- Returns:    setof pglogq.message, in delivery order: priority desc, then transaction order.
--             Empty when no new tick has been made since the last batch.
-- Raises:     PQ001 unknown queue; PQ002 unknown consumer; PQ004 invalid worker name;
--             PQ019 max_messages out of range.
-- Tables:     subscription (lock and one update), tick (read), event (read).
-- Until ack(batch_id), calling receive again returns the same page (a crash before ack
-- redelivers).  ack acknowledges exactly the returned page; the next receive returns the rest
-- of the batch; the consumer passes the batch when all of it is acknowledged.  Two concurrent
-- calls for the same consumer (or worker) serialise on its row and get the same page.
CREATE OR REPLACE FUNCTION pglogq.receive(
    queue_name text, consumer_name text, max_messages integer DEFAULT 100, worker_name text DEFAULT NULL)
RETURNS SETOF pglogq.message LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    c pglogq.subscription;
    h pglogq.subscription;
    prev_snap pg_snapshot;
    cur_snap pg_snapshot;
    page pglogq.message[];
    n integer;
    last_row pglogq.message;
    empty_batches integer := 0;
BEGIN
    IF max_messages IS NULL OR max_messages < 1 OR max_messages > 100000 THEN
        RAISE EXCEPTION 'invalid max_messages %: use 1..100000', coalesce(max_messages::text, 'NULL')
            USING ERRCODE = 'PQ019';
    END IF;
    q := pglogq._queue(queue_name);
    c := pglogq._consumer(q.queue_id, queue_name, consumer_name);
    IF worker_name IS NULL THEN
        SELECT * INTO h FROM pglogq.subscription s WHERE s.sub_id = c.sub_id FOR NO KEY UPDATE;
    ELSE
        IF worker_name !~ '^[A-Za-z0-9_.:@-]{1,63}$' THEN
            RAISE EXCEPTION 'invalid worker name "%": 1 to 63 ASCII letters, digits or _.:@-', left(worker_name, 80)
                USING ERRCODE = 'PQ004';
        END IF;
        SELECT * INTO h FROM pglogq.subscription s
         WHERE s.parent_id = c.sub_id AND s.worker_name = receive.worker_name FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            INSERT INTO pglogq.subscription (queue_id, consumer_name, parent_id, worker_name, heartbeat_at, last_seen)
            VALUES (q.queue_id, c.consumer_name, c.sub_id, receive.worker_name, clock_timestamp(), clock_timestamp())
            ON CONFLICT DO NOTHING;
            SELECT * INTO h FROM pglogq.subscription s
             WHERE s.parent_id = c.sub_id AND s.worker_name = receive.worker_name FOR NO KEY UPDATE;
        END IF;
    END IF;
    LOOP
        IF h.batch_id IS NULL THEN
            h := pglogq._take_batch(q, c.sub_id, h);
            IF h.batch_id IS NULL THEN
                IF h.last_seen IS NULL OR h.last_seen < clock_timestamp() - interval '1 second'
                   OR h.last_tick IS DISTINCT FROM c.last_tick THEN
                    UPDATE pglogq.subscription s
                       SET last_seen = clock_timestamp(), heartbeat_at = clock_timestamp()
                     WHERE s.sub_id = h.sub_id;
                END IF;
                RETURN;
            END IF;
        END IF;
        SELECT t.tick_snapshot INTO prev_snap FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_id = h.batch_prev_tick;
        SELECT t.tick_snapshot INTO cur_snap FROM pglogq.tick t
         WHERE t.queue_id = q.queue_id AND t.tick_id = h.batch_cur_tick;
        page := ARRAY(SELECT m FROM pglogq._batch_page(q.queue_id, coalesce(h.parent_id, h.sub_id),
                                                        prev_snap, cur_snap, h.batch_big,
                                                        h.page_prio, h.page_txid, h.page_id,
                                                        max_messages + 1) m);
        n := cardinality(page);
        EXIT WHEN n > 0 OR empty_batches >= 100;
        -- nothing (left) in this batch for us: pass it and look at the next one
        empty_batches := empty_batches + 1;
        h.batch_id := NULL;
        h.batch_prev_tick := NULL;
        h.batch_cur_tick := NULL;
        h.batch_big := NULL;
        h.page_prio := NULL;
        h.page_txid := NULL;
        h.page_id := NULL;
    END LOOP;
    IF n > max_messages THEN
        last_row := page[max_messages];
    ELSIF n > 0 THEN
        last_row := page[n];
    END IF;
    UPDATE pglogq.subscription s
       SET last_tick = h.last_tick, batch_id = h.batch_id, batch_prev_tick = h.batch_prev_tick,
           batch_cur_tick = h.batch_cur_tick, batch_big = h.batch_big,
           batch_started_at = h.batch_started_at,
           page_prio = h.page_prio, page_txid = h.page_txid, page_id = h.page_id,
           page_end_prio = last_row.priority, page_end_txid = last_row.txid, page_end_id = last_row.msg_id,
           page_more = (n > max_messages),
           heartbeat_at = clock_timestamp(), last_seen = clock_timestamp()
     WHERE s.sub_id = h.sub_id;
    IF n = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT h.batch_id, m.msg_id, m.type, m.payload, m.headers, m.retry_count, m.created_at, m.priority, m.txid
      FROM unnest(page[1:max_messages]) m;
END $$;

-- function send.sql
-- pglogq.send(queue_name, payload, ...): append one event to a queue.
-- Parameters: queue_name; payload  any JSON value (not SQL NULL), at most max_payload_bytes
--             type  free text, at most 255 bytes; headers  a JSON object or NULL
--             priority  0..32767, higher first when a backlog exists (default 100)
--             idempotency_key  same key in the same queue within idempotency_window → same id, no new event
--             deliver_at / delay  deliver no earlier than this (one of them, not both)
-- Returns:    the message id.
-- Raises:     PQ001 unknown queue; PQ006 payload too large; PQ007 invalid payload or headers;
--             PQ011 invalid delay; PQ019 invalid argument.
-- Tables:     event (insert into the current child), delayed, idempotency_key.
-- Runs in the caller's transaction: the event is delivered only if that transaction commits.
CREATE OR REPLACE FUNCTION pglogq.send(
    queue_name text, payload jsonb, type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_key text DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    slot smallint;
    seq regclass;
    maxbytes integer;
    win interval;
    mid bigint;
    got bigint;
    due timestamptz;
BEGIN
    SELECT q.queue_id, q.cur_table, q.event_seq, q.max_payload_bytes, q.idempotency_window
      INTO qid, slot, seq, maxbytes, win
      FROM pglogq.queue q WHERE q.queue_name = send.queue_name;
    IF NOT FOUND THEN
        PERFORM pglogq._queue(queue_name);  -- raises PQ001 with a hint
    END IF;
    PERFORM pglogq._check_event(payload, type, headers, priority, maxbytes, NULL);
    due := pglogq._due_time(deliver_at, delay);
    IF idempotency_key IS NOT NULL THEN
        IF idempotency_key = '' OR octet_length(idempotency_key) > 255 THEN
            RAISE EXCEPTION 'invalid idempotency key: must be 1 to 255 bytes' USING ERRCODE = 'PQ019';
        END IF;
        mid := nextval(seq);
        INSERT INTO pglogq.idempotency_key AS k (queue_id, idem_key, msg_id)
        VALUES (qid, idempotency_key, mid)
        ON CONFLICT (queue_id, idem_key) DO UPDATE SET msg_id = EXCLUDED.msg_id, created_at = now()
              WHERE k.created_at < now() - win
        RETURNING k.msg_id INTO got;
        IF got IS NULL THEN
            SELECT k.msg_id INTO got FROM pglogq.idempotency_key k
             WHERE k.queue_id = qid AND k.idem_key = send.idempotency_key;
            RETURN got;
        END IF;
    END IF;
    IF due IS NOT NULL THEN
        INSERT INTO pglogq.delayed (queue_id, msg_id, deliver_at, ev_type, ev_payload, ev_headers, ev_priority)
        VALUES (qid, coalesce(mid, nextval(seq)), due, type, payload, headers, priority)
        RETURNING msg_id INTO mid;
        RETURN mid;
    END IF;
    INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers, ev_priority)
    VALUES (qid, slot, coalesce(mid, nextval(seq)), type, payload, headers, priority)
    RETURNING ev_id INTO mid;
    RETURN mid;
END $$;

-- function send_batch.sql
-- pglogq.send_batch(queue_name, payloads, ...): append many events in one statement.
-- Parameters: queue_name; payloads  jsonb[] (no NULL elements); type, headers, priority  for every event;
--             idempotency_keys  text[] of the same length, or NULL (elements may be NULL)
--             deliver_at / delay  as for send
-- Returns:    the message ids, in the order of payloads.
-- Raises:     as send; the whole batch is refused if one element is invalid.
-- Tables:     event (insert into the current child); with keys or delays, as send.
CREATE OR REPLACE FUNCTION pglogq.send_batch(
    queue_name text, payloads jsonb[], type text DEFAULT NULL, headers jsonb DEFAULT NULL,
    priority integer DEFAULT 100, idempotency_keys text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    slot smallint;
    seq regclass;
    maxbytes integer;
    ids bigint[];
    i integer;
    bad integer;
BEGIN
    SELECT q.queue_id, q.cur_table, q.event_seq, q.max_payload_bytes
      INTO qid, slot, seq, maxbytes
      FROM pglogq.queue q WHERE q.queue_name = send_batch.queue_name;
    IF NOT FOUND THEN
        PERFORM pglogq._queue(queue_name);
    END IF;
    IF payloads IS NULL OR cardinality(payloads) = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    IF cardinality(payloads) > 100000 THEN
        RAISE EXCEPTION 'too many events in one batch: % (at most 100000)', cardinality(payloads)
            USING ERRCODE = 'PQ019';
    END IF;
    PERFORM pglogq._check_event('{}'::jsonb, type, headers, priority, maxbytes, NULL);
    SELECT min(o) INTO bad FROM unnest(payloads) WITH ORDINALITY AS u(p, o)
     WHERE p IS NULL OR pg_column_size(p) > maxbytes;
    IF bad IS NOT NULL THEN
        PERFORM pglogq._check_event(payloads[bad], type, headers, priority, maxbytes, bad);
    END IF;
    IF idempotency_keys IS NOT NULL OR deliver_at IS NOT NULL OR delay IS NOT NULL THEN
        IF idempotency_keys IS NOT NULL AND cardinality(idempotency_keys) <> cardinality(payloads) THEN
            RAISE EXCEPTION 'idempotency_keys has % elements, payloads has %',
                cardinality(idempotency_keys), cardinality(payloads) USING ERRCODE = 'PQ019';
        END IF;
        ids := ARRAY[]::bigint[];
        FOR i IN 1 .. cardinality(payloads) LOOP
            ids := ids || pglogq.send(queue_name, payloads[i], type, headers, priority,
                                      idempotency_keys[i], deliver_at, delay);
        END LOOP;
        RETURN ids;
    END IF;
    WITH v AS (
        SELECT p, o, nextval(seq) AS id FROM unnest(payloads) WITH ORDINALITY AS u(p, o)
    ), ins AS (
        INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_type, ev_payload, ev_headers, ev_priority)
        SELECT qid, slot, v.id, type, v.p, headers, priority FROM v
    )
    SELECT array_agg(v.id ORDER BY v.o) INTO ids FROM v;
    RETURN ids;
END $$;

-- function set_queue_config.sql
-- pglogq.set_queue_config(queue_name, param, value): change one setting of a queue.
-- Parameters: queue_name; param  one of the names below; value  text form of the new value
--   paused (boolean)                  stop ticking the queue (sends still append)
--   rotation_period (interval > 0)    how often event tables rotate
--   ticker_max_count (integer >= 1)   tick as soon as this many events are waiting
--   ticker_max_lag (interval >= 0)    tick when events have waited this long (0: at once)
--   ticker_idle_period (interval > 0) keep-alive tick when nothing happens
--   batch_max_events (integer >= 1)   merge ticks into one batch up to about this many events
--   big_batch_events (integer >= 1)   above this a batch is streamed in commit order, not priority order
--   max_retries (integer >= 1)        redeliveries before an event is dead-lettered
--   retry_delay (interval >= 0)       default retry_after of nack
--   max_payload_bytes (integer >= 1)  largest accepted payload (stored size)
--   idempotency_window (interval > 0) how long an idempotency key is remembered
--   dead_interval (interval > 0)      silence after which a worker's batch is taken over
--   max_consumer_lag (interval >= 0)  retention limit: consumers further behind are moved forward (0: off)
-- Returns:    the new value as text.
-- Raises:     PQ001 unknown queue; PQ005 unknown parameter or invalid value.
-- Tables:     queue (update).
CREATE OR REPLACE FUNCTION pglogq.set_queue_config(queue_name text, param text, value text)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    kind text;
    iv interval;
    nv bigint;
    bv boolean;
    result text;
BEGIN
    q := pglogq._queue(queue_name);
    kind := CASE param
        WHEN 'paused' THEN 'bool'
        WHEN 'rotation_period' THEN 'interval+'
        WHEN 'ticker_max_lag' THEN 'interval'
        WHEN 'ticker_idle_period' THEN 'interval+'
        WHEN 'retry_delay' THEN 'interval'
        WHEN 'idempotency_window' THEN 'interval+'
        WHEN 'dead_interval' THEN 'interval+'
        WHEN 'max_consumer_lag' THEN 'interval'
        WHEN 'ticker_max_count' THEN 'int'
        WHEN 'batch_max_events' THEN 'int'
        WHEN 'big_batch_events' THEN 'int'
        WHEN 'max_retries' THEN 'int'
        WHEN 'max_payload_bytes' THEN 'int'
    END;
    IF kind IS NULL THEN
        RAISE EXCEPTION 'unknown queue parameter "%"', left(coalesce(param, 'NULL'), 80)
            USING ERRCODE = 'PQ005',
                  HINT = 'one of paused, rotation_period, ticker_max_count, ticker_max_lag, ticker_idle_period, '
                         'batch_max_events, big_batch_events, max_retries, retry_delay, max_payload_bytes, '
                         'idempotency_window, dead_interval, max_consumer_lag';
    END IF;
    IF value IS NULL THEN
        RAISE EXCEPTION 'invalid value for %: NULL', param USING ERRCODE = 'PQ005';
    END IF;
    BEGIN
        IF kind = 'bool' THEN
            bv := value::boolean;
            result := bv::text;
        ELSIF kind LIKE 'interval%' THEN
            iv := value::interval;
            IF iv < interval '0' OR (kind = 'interval+' AND iv = interval '0') OR iv > interval '100 years' THEN
                RAISE EXCEPTION 'out of range' USING ERRCODE = '22003';
            END IF;
            result := iv::text;
        ELSE
            nv := value::bigint;
            IF nv < 1 OR nv > 2147483647 THEN
                RAISE EXCEPTION 'out of range' USING ERRCODE = '22003';
            END IF;
            result := nv::text;
        END IF;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'invalid value for %: "%" (%)', param, left(value, 80),
            CASE kind WHEN 'bool' THEN 'expected true or false'
                      WHEN 'interval+' THEN 'expected a positive interval such as ''5 seconds'''
                      WHEN 'interval' THEN 'expected an interval >= 0 such as ''100 ms'''
                      ELSE 'expected an integer >= 1' END
            USING ERRCODE = 'PQ005';
    END;
    EXECUTE format('UPDATE pglogq.queue SET %I = $1::%s WHERE queue_id = $2', param,
                   CASE kind WHEN 'bool' THEN 'boolean' WHEN 'int' THEN 'integer' ELSE 'interval' END)
      USING result, q.queue_id;
    RETURN result;
END $$;

-- function subscribe.sql
-- pglogq.subscribe(queue_name, consumer_name): register a consumer; it gets events sent from now on.
-- Parameters: queue_name; consumer_name  ASCII name, at most 63 bytes
-- Returns:    true if subscribed, false if it already was (nothing changed).
-- Raises:     PQ001 unknown queue; PQ004 invalid name.
-- Tables:     subscription (insert), tick (read).
-- Concurrency: racing subscribers of one name serialise on an advisory lock; one wins.
CREATE OR REPLACE FUNCTION pglogq.subscribe(queue_name text, consumer_name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
    last bigint;
BEGIN
    PERFORM pglogq._check_name(consumer_name, 'consumer', 63);
    q := pglogq._queue(queue_name);
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    IF EXISTS (SELECT 1 FROM pglogq.subscription s
                WHERE s.queue_id = q.queue_id AND s.consumer_name = subscribe.consumer_name
                  AND s.parent_id IS NULL) THEN
        RETURN false;
    END IF;
    SELECT max(tick_id) INTO last FROM pglogq.tick t WHERE t.queue_id = q.queue_id;
    INSERT INTO pglogq.subscription (queue_id, consumer_name, last_tick, last_seen)
    VALUES (q.queue_id, subscribe.consumer_name, last, now());
    RETURN true;
END $$;

-- function ticker.sql
-- pglogq.ticker(queue_name): tick every non-paused queue (or one) whose thresholds say so.
-- Parameters: queue_name  one queue, or NULL for all
-- Returns:    the number of ticks written.
-- Raises:     PQ001 unknown queue; PQ014 not in READ COMMITTED; PQ015 txids went backwards.
-- Tables:     tick (insert), event (probe).  Sends NOTIFY "pglogq.<queue>" with the tick id.
-- Thresholds (set_queue_config): a tick is written when committed events wait and either
-- ticker_max_count are waiting or ticker_max_lag has passed since the last tick, or when
-- ticker_idle_period has passed (keep-alive).  A queue another ticker is ticking is skipped.
CREATE OR REPLACE FUNCTION pglogq.ticker(queue_name text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    qid integer;
    n integer := 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the ticker must run in READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'PQ014';
    END IF;
    IF queue_name IS NOT NULL THEN
        qid := (pglogq._queue(queue_name)).queue_id;
    END IF;
    FOR qid IN SELECT x.queue_id FROM pglogq.queue x
                WHERE (ticker.queue_name IS NULL AND NOT x.paused) OR x.queue_id = qid
                ORDER BY x.queue_id LOOP
        IF pglogq._tick(qid, false) IS NOT NULL THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END $$;

-- function unsubscribe.sql
-- pglogq.unsubscribe(queue_name, consumer_name): remove a consumer, its workers, retries and dead letters.
-- Parameters: queue_name; consumer_name
-- Returns:    true if removed, false if it was not subscribed.
-- Raises:     PQ001 unknown queue; PQ004 invalid name.
-- Tables:     subscription (delete, cascades to retry, dead_letter, progress).
CREATE OR REPLACE FUNCTION pglogq.unsubscribe(queue_name text, consumer_name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    q pglogq.queue;
BEGIN
    PERFORM pglogq._check_name(consumer_name, 'consumer', 63);
    q := pglogq._queue(queue_name);
    PERFORM pg_advisory_xact_lock(hashtext('pglogq.registry'));
    DELETE FROM pglogq.subscription s
     WHERE s.queue_id = q.queue_id AND s.consumer_name = unsubscribe.consumer_name;
    RETURN FOUND;
END $$;

-- roles
-- roles.sql: the three pglogq roles and their grants.  Re-applied on every install/upgrade.
--   pglogq_writer  produce: send, send_batch, cancel, queue_info
--   pglogq_reader  consume: receive, ack, nack, heartbeat/progress, queue_info, consumer_info
--   pglogq_admin   both, plus queues, subscriptions, ticker, maintenance, DLQ, seek
-- Writer and reader are siblings (neither includes the other).  PUBLIC gets nothing: every
-- function is SECURITY DEFINER with a pinned search_path, so roles need EXECUTE only.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pglogq_writer') THEN
        CREATE ROLE pglogq_writer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pglogq_reader') THEN
        CREATE ROLE pglogq_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pglogq_admin') THEN
        CREATE ROLE pglogq_admin NOLOGIN;
    END IF;
END $$;

GRANT pglogq_writer, pglogq_reader TO pglogq_admin;

REVOKE ALL ON SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pglogq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pglogq FROM PUBLIC;
GRANT USAGE ON SCHEMA pglogq TO pglogq_writer, pglogq_reader, pglogq_admin;

-- grants are derived from the table below: one place says who may call what
DO $$
DECLARE
    r record;
    roles_of jsonb := '{
        "send": ["pglogq_writer"], "send_batch": ["pglogq_writer"], "cancel": ["pglogq_writer"],
        "queue_info": ["pglogq_writer", "pglogq_reader"],
        "receive": ["pglogq_reader"], "ack": ["pglogq_reader"], "nack": ["pglogq_reader"],
        "heartbeat": ["pglogq_reader"], "report_progress": ["pglogq_reader"],
        "consumer_info": ["pglogq_reader"], "schema_version": ["pglogq_writer", "pglogq_reader"]
    }';
    who text;
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS sig, p.proname
               FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname !~ '^_' LOOP
        IF roles_of ? r.proname THEN
            FOR who IN SELECT jsonb_array_elements_text(roles_of -> r.proname) LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', r.sig, who);
            END LOOP;
        END IF;
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pglogq_admin', r.sig);
    END LOOP;
END $$;
GRANT SELECT ON ALL TABLES IN SCHEMA pglogq TO pglogq_admin;

COMMIT;
