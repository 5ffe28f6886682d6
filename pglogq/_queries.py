"""Every SQL statement the Python client issues, in one place.

They never depend on the session's settings: functions, types and operators are schema-qualified
(a caller's ``search_path`` may put other schemas first), and jsonb comes back as text that the
client decodes itself (see ``pglogq._codec``), whatever loaders the connection has.
"""

from __future__ import annotations

from typing_extensions import LiteralString

CREATE_QUEUE: LiteralString = "SELECT pglogq.create_queue(%s)"
DROP_QUEUE: LiteralString = "SELECT pglogq.drop_queue(%s, %s)"
SET_QUEUE_CONFIG: LiteralString = "SELECT pglogq.set_queue_config(%s, %s, %s)"
SUBSCRIBE: LiteralString = "SELECT pglogq.subscribe(%s, %s, %s, %s)"
UNSUBSCRIBE: LiteralString = "SELECT pglogq.unsubscribe(%s, %s)"
SET_SHARE_WINDOW: LiteralString = "SELECT pglogq.set_share_window(%s, %s, %s)"
SEND: LiteralString = (
    "SELECT pglogq.send(%s, %s, type => %s, headers => %s, priority => %s,"
    " idempotency_key => %s, deliver_at => %s, delay => %s)"
)
SEND_KEYED: LiteralString = (
    "SELECT pglogq.send_keyed(%s, %s, %s, type => %s, headers => %s, priority => %s,"
    " idempotency_key => %s, deliver_at => %s, delay => %s)"
)
SEND_PLAIN: LiteralString = "SELECT pglogq.send(%s, %s)"
SEND_TYPED: LiteralString = "SELECT pglogq.send(%s, %s, %s)"
SEND_BATCH: LiteralString = (
    "SELECT pglogq.send_batch_keyed(%s, %s, %s, type => %s, headers => %s, priority => %s,"
    " idempotency_keys => %s, deliver_at => %s, delay => %s)"
)
TICKER: LiteralString = "SELECT pglogq.ticker(%s)"
FORCE_TICK: LiteralString = "SELECT pglogq.force_tick(%s)"
RECEIVE: LiteralString = (
    "SELECT batch_id, msg_id, type, payload::pg_catalog.text, headers::pg_catalog.text, retry_count,"
    " created_at, priority, txid::pg_catalog.text"
    " FROM pglogq.receive(%s, %s, %s, %s, %s)"
)
ACK: LiteralString = "SELECT pglogq.ack(%s, %s, %s::pg_catalog.xid8)"
ACK_RECEIVE: LiteralString = (
    "SELECT batch_id, msg_id, type, payload::pg_catalog.text, headers::pg_catalog.text, retry_count,"
    " created_at, priority, txid::pg_catalog.text"
    " FROM pglogq.ack_receive(%s, %s, %s::pg_catalog.xid8, %s, %s, %s, %s, %s)"
)
CEDE: LiteralString = "SELECT pglogq.cede(%s, %s, %s::pg_catalog.xid8)"
NACK: LiteralString = "SELECT pglogq.nack(%s, %s, %s, %s, %s::pg_catalog.xid8, %s)"
CANCEL: LiteralString = "SELECT pglogq.cancel(%s, %s)"
REQUEST_STOP: LiteralString = "SELECT pglogq.request_stop(%s, %s)"
MARK_STARTED: LiteralString = "SELECT pglogq.mark_started(%s, %s, %s::pg_catalog.xid8, %s)"
STOP_REQUESTS: LiteralString = "SELECT pglogq.stop_requests(%s, %s::pg_catalog.int8[])"
SET_TYPE_CONFIG: LiteralString = "SELECT pglogq.set_type_config(%s, %s, %s, %s)"
TYPE_CONFIG: LiteralString = (
    "SELECT type, max_retries, retry_delay, retry_factor, retry_cap, retry_jitter FROM pglogq.type_config(%s)"
)
LOOKUP: LiteralString = (
    "SELECT consumer, state, %s::pg_catalog.int8, type, created_at, worker, since, last_heartbeat,"
    " percent::pg_catalog.float8, stage, due_at, attempts, reason, dead_id, detail, NULL::pg_catalog.text,"
    " finished_at, result::pg_catalog.text, history::pg_catalog.text"
    " FROM pglogq.lookup(%s, %s)"
)
JOBS: LiteralString = (
    "SELECT consumer, state, msg_id, type, created_at, worker, since, last_heartbeat, percent::pg_catalog.float8,"
    " stage, due_at, attempts, reason, dead_id, NULL::pg_catalog.text, cursor, finished_at"
    " FROM pglogq.jobs(%s, %s, %s, %s, %s, %s, %s, %s)"
)
MAX_RESULT_BYTES: LiteralString = "SELECT max_result_bytes FROM pglogq.queue_config(%s)"
RESULT: LiteralString = (
    "SELECT outcome, final, attempt, worker, started_at, finished_at, error, result::pg_catalog.text"
    " FROM pglogq.result(%s, %s, %s)"
)
ACK_GROUP: LiteralString = (
    # the outcomes first (record_outcomes needs the batch open), then the ack, in one statement:
    # one round trip, and the outcomes commit exactly when the page does.  The usual page: its
    # runs as one group (ids, starts, ends, types, the one type, the bounds of the ids and ends)
    "WITH r AS MATERIALIZED (SELECT pglogq.record_outcomes(%s, %s::pg_catalog.int8[], NULL,"
    " %s::pg_catalog.float8[], %s::pg_catalog.float8[], types => %s::pg_catalog.text[], msg_type => %s,"
    " id_range => pg_catalog.int8range(%s, %s, '[]'), finished_range => ARRAY[%s, %s]::pg_catalog.float8[]) AS n)"
    " SELECT pglogq.ack(%s, %s, %s::pg_catalog.xid8), r.n FROM r"
)
ACK_OUTCOMES: LiteralString = (
    # as ACK_GROUP, with a second call: the runs that did not end plainly, one by one
    "WITH r AS MATERIALIZED (SELECT pglogq.record_outcomes(%s, %s::pg_catalog.int8[], NULL,"
    " %s::pg_catalog.float8[], %s::pg_catalog.float8[], types => %s::pg_catalog.text[], msg_type => %s,"
    " id_range => pg_catalog.int8range(%s, %s, '[]'), finished_range => ARRAY[%s, %s]::pg_catalog.float8[]) AS n),"
    " x AS MATERIALIZED (SELECT pglogq.record_outcomes(%s, %s::pg_catalog.int8[], %s::pg_catalog.int4[],"
    " %s::pg_catalog.float8[], %s::pg_catalog.float8[], %s::pg_catalog.text[], %s::pg_catalog.text[],"
    " %s::pg_catalog.text[], %s::pg_catalog.text[]) AS n)"
    " SELECT pglogq.ack(%s, %s, %s::pg_catalog.xid8), r.n + x.n FROM r, x"
)
SCHEDULE_ADD: LiteralString = (
    "SELECT pglogq.schedule_add(%s, %s, %s, %s, type => %s, headers => %s, priority => %s, missed => %s)"
)
SCHEDULE_REMOVE: LiteralString = "SELECT pglogq.schedule_remove(%s, %s)"
SCHEDULE_LIST: LiteralString = (
    "SELECT queue, name, cron, type, payload::pg_catalog.text, headers::pg_catalog.text, priority, missed,"
    " created_at, next_due, last_due, last_msg_id, sent, skipped FROM pglogq.schedule_list(%s, %s)"
)
# the dead-letter filters come in one order in every dlq_ function: queue, consumer, type, older_than
DLQ_INSPECT: LiteralString = (
    "SELECT dead_id, queue, consumer, msg_id, type, payload::pg_catalog.text, headers::pg_catalog.text,"
    " retry_count, reason, created_at, first_failed_at, failed_at FROM pglogq.dlq_inspect(%s, %s, %s, %s, %s)"
)
DLQ_REPLAY: LiteralString = "SELECT pglogq.dlq_replay(%s)"
DLQ_REPLAY_ALL: LiteralString = "SELECT pglogq.dlq_replay_all(%s, %s, %s, %s, %s)"
DLQ_PURGE: LiteralString = "SELECT pglogq.dlq_purge(%s, %s, %s, %s)"
DLQ_COUNT: LiteralString = "SELECT pglogq.dlq_count(%s, %s, %s, %s)"
DLQ_SEARCH: LiteralString = (
    "SELECT dead_id, queue, consumer, msg_id, type, payload_text, payload_chars, headers_text, headers_chars,"
    " retry_count, reason, created_at, first_failed_at, failed_at"
    " FROM pglogq.dlq_search(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
DLQ_TEXT: LiteralString = "SELECT payload_text, headers_text FROM pglogq.dlq_text(%s)"
STORED_EVENTS: LiteralString = "SELECT pglogq.stored_events(%s)"
TICKER_INFO: LiteralString = "SELECT last_run_at FROM pglogq.ticker_info()"
TICKER_HOLDER: LiteralString = "SELECT pid, application_name, client, since FROM pglogq.ticker_holder()"
MAINT_OPERATIONS: LiteralString = "SELECT op, queue_name FROM pglogq.maint_operations()"
MAINT_RUN: LiteralString = "SELECT pglogq.maint_run(%s, %s)"
ROTATE_STEP1: LiteralString = "SELECT pglogq.maint_rotate_step1(%s, %s)"
ROTATE_STEP2: LiteralString = "SELECT pglogq.maint_rotate_step2(%s)"
QUEUE_INFO: LiteralString = (
    "SELECT i.*, l.partitions, l.urgent_lane FROM pglogq.queue_info(%s) i"
    " CROSS JOIN LATERAL pglogq.queue_layout(i.queue_name) l ORDER BY i.queue_name"
)
SEEK_PLAN: LiteralString = "SELECT * FROM pglogq.seek_plan(%s, %s, %s, %s)"
SEEK: LiteralString = "SELECT * FROM pglogq.seek(%s, %s, %s, %s, %s)"
CONSUMER_INFO: LiteralString = "SELECT * FROM pglogq.consumer_info(%s, %s)"
LEASES: LiteralString = "SELECT * FROM pglogq.leases(%s, %s)"
HEARTBEAT: LiteralString = "SELECT pglogq.heartbeat(%s)"
REPORT_PROGRESS: LiteralString = (
    "SELECT pglogq.report_progress(%s, %s, %s::pg_catalog.numeric, %s::pg_catalog.text, %s::pg_catalog.jsonb,"
    " %s::pg_catalog.text, %s::pg_catalog.timestamptz)"
)
IN_FLIGHT: LiteralString = (
    "SELECT queue_name, consumer_name, worker, batch_id, msg_id, started_at, last_heartbeat,"
    " running_for, silent_for, percent::pg_catalog.float8, stage, counters::pg_catalog.text, expires_at,"
    " delivery_count FROM pglogq.in_flight"
    " WHERE (%s::pg_catalog.text IS NULL OR queue_name OPERATOR(pg_catalog.=) %s)"
    " AND (%s::pg_catalog.text IS NULL OR consumer_name OPERATOR(pg_catalog.=) %s)"
    " ORDER BY started_at, msg_id"
)
SCHEMA_LOCK: LiteralString = "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pglogq.schema'))"
SCHEMA_EXISTS: LiteralString = "SELECT pg_catalog.to_regclass('pglogq.schema_version') IS NOT NULL"
SCHEMA_VERSIONS: LiteralString = "SELECT version FROM pglogq.schema_version ORDER BY version"
CAPTURE_TABLE: LiteralString = (
    "SELECT pglogq.capture_table(%s::pg_catalog.text::pg_catalog.regclass, %s, include_columns => %s,"
    " exclude_columns => %s, key_columns => %s, old_values => %s, only_if => %s)"
)
UNCAPTURE_TABLE: LiteralString = (
    "SELECT pglogq.uncapture_table(%s::pg_catalog.text::pg_catalog.regclass, %s)"
)
CAPTURED_TABLES: LiteralString = (
    "SELECT table_name::pg_catalog.text, queue_name, key_columns, include_columns, exclude_columns,"
    " old_values, only_if::pg_catalog.text FROM pglogq.captured_tables(%s)"
)
# the wake-up of a consumer's receive loop (pglogq._wakeup_async): LISTEN and UNLISTEN take the
# channel as an identifier (sql.SQL(...).format(sql.Identifier(channel))), the probe's NOTIFY as a value
LISTEN: LiteralString = "LISTEN {}"
UNLISTEN: LiteralString = "UNLISTEN {}"
NOTIFY: LiteralString = "SELECT pg_catalog.pg_notify(%s, '')"
