"""Every SQL statement the Python client issues, in one place."""

from __future__ import annotations

from typing_extensions import LiteralString

CREATE_QUEUE: LiteralString = "SELECT pglogq.create_queue(%s)"
DROP_QUEUE: LiteralString = "SELECT pglogq.drop_queue(%s, %s)"
SET_QUEUE_CONFIG: LiteralString = "SELECT pglogq.set_queue_config(%s, %s, %s)"
SUBSCRIBE: LiteralString = "SELECT pglogq.subscribe(%s, %s)"
UNSUBSCRIBE: LiteralString = "SELECT pglogq.unsubscribe(%s, %s)"
SEND: LiteralString = (
    "SELECT pglogq.send(%s, %s, type => %s, headers => %s, priority => %s,"
    " idempotency_key => %s, deliver_at => %s, delay => %s)"
)
SEND_BATCH: LiteralString = (
    "SELECT pglogq.send_batch_json(%s, %s, type => %s, headers => %s, priority => %s,"
    " idempotency_keys => %s, deliver_at => %s, delay => %s)"
)
TICKER: LiteralString = "SELECT pglogq.ticker(%s)"
FORCE_TICK: LiteralString = "SELECT pglogq.force_tick(%s)"
RECEIVE: LiteralString = (
    "SELECT batch_id, msg_id, type, payload, headers, retry_count, created_at, priority, txid::text"
    " FROM pglogq.receive(%s, %s, %s, %s)"
)
ACK: LiteralString = "SELECT pglogq.ack(%s, %s, %s::xid8)"
NACK: LiteralString = "SELECT pglogq.nack(%s, %s, %s, %s, %s::xid8)"
CANCEL: LiteralString = "SELECT pglogq.cancel(%s, %s)"
DLQ_INSPECT: LiteralString = "SELECT * FROM pglogq.dlq_inspect(%s, %s, %s, %s, %s)"
DLQ_REPLAY: LiteralString = "SELECT pglogq.dlq_replay(%s)"
DLQ_REPLAY_ALL: LiteralString = "SELECT pglogq.dlq_replay_all(%s, %s, %s, %s)"
DLQ_PURGE: LiteralString = "SELECT pglogq.dlq_purge(%s, %s, %s, %s)"
MAINT_OPERATIONS: LiteralString = "SELECT op, queue_name FROM pglogq.maint_operations()"
MAINT_RUN: LiteralString = "SELECT pglogq.maint_run(%s, %s)"
ROTATE_STEP1: LiteralString = "SELECT pglogq.maint_rotate_step1(%s, %s)"
ROTATE_STEP2: LiteralString = "SELECT pglogq.maint_rotate_step2(%s)"
QUEUE_INFO: LiteralString = "SELECT * FROM pglogq.queue_info(%s)"
SEEK_PLAN: LiteralString = "SELECT * FROM pglogq.seek_plan(%s, %s, %s, %s)"
SEEK: LiteralString = "SELECT * FROM pglogq.seek(%s, %s, %s, %s, %s)"
CONSUMER_INFO: LiteralString = "SELECT * FROM pglogq.consumer_info(%s, %s)"
HEARTBEAT: LiteralString = "SELECT pglogq.heartbeat(%s)"
REPORT_PROGRESS: LiteralString = (
    "SELECT pglogq.report_progress(%s, %s, %s::numeric, %s::text, %s::jsonb, %s::text, %s::timestamptz)"
)
IN_FLIGHT: LiteralString = (
    "SELECT queue_name, consumer_name, worker, batch_id, msg_id, started_at, last_heartbeat,"
    " running_for, silent_for, percent::float8, stage, counters FROM pglogq.in_flight"
    " WHERE (%s::text IS NULL OR queue_name = %s) AND (%s::text IS NULL OR consumer_name = %s)"
    " ORDER BY started_at, msg_id"
)
SCHEMA_LOCK: LiteralString = "SELECT pg_advisory_xact_lock(hashtext('pglogq.schema'))"
SCHEMA_EXISTS: LiteralString = "SELECT to_regclass('pglogq.schema_version') IS NOT NULL"
SCHEMA_VERSIONS: LiteralString = "SELECT version FROM pglogq.schema_version ORDER BY version"
