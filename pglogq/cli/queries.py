"""SQL the command line issues itself (everything else goes through :class:`pglogq.Client`).

Only calls of pglogq's SQL functions and reads of its views: the command line never reads a
pglogq table (tests/package/test_sql_api_only.py checks), so it works on whatever the SQL API promises.
Calls name their arguments where the client does not expose a parameter.
"""

from __future__ import annotations

from typing_extensions import LiteralString

QUEUE_CONFIG: LiteralString = "SELECT * FROM pglogq.queue_config(%s)"
STORED_EVENTS: LiteralString = "SELECT pglogq.stored_events(%s)"
IN_FLIGHT_EXISTS: LiteralString = "SELECT to_regclass('pglogq.in_flight') IS NOT NULL"
IN_FLIGHT: LiteralString = "SELECT * FROM pglogq.in_flight"
TICKER_INFO_EXISTS: LiteralString = "SELECT to_regprocedure('pglogq.ticker_info()') IS NOT NULL"
TICKER_INFO: LiteralString = "SELECT last_run_at FROM pglogq.ticker_info()"
# schedule_list is for admins: status run by another role shows no schedules section
SCHEDULES_VISIBLE: LiteralString = (
    "SELECT to_regprocedure('pglogq.schedule_list(text, integer)') IS NOT NULL"
    " AND has_function_privilege('pglogq.schedule_list(text, integer)', 'EXECUTE'),"
    " to_regprocedure('pglogq.schedule_count(text)') IS NOT NULL"
    " AND has_function_privilege('pglogq.schedule_count(text)', 'EXECUTE')"
)
# how many schedules there are: status lists only the soonest few
SCHEDULE_COUNT: LiteralString = "SELECT pglogq.schedule_count(%s)"
SERVER_INFO: LiteralString = (
    "SELECT current_database(), current_setting('server_version'), current_user, now()"
)

# the dead-letter filters, in the one order of every dlq_ function: queue, consumer, type, older_than
DLQ_INSPECT: LiteralString = """
SELECT dead_id, queue, consumer, msg_id, type, payload, headers, retry_count, reason, created_at,
       first_failed_at, failed_at
  FROM pglogq.dlq_inspect(%(queue)s, %(consumer)s, %(type)s, %(older_than)s, max_rows => %(limit)s)
"""
DLQ_SHOW: LiteralString = """
SELECT dead_id, queue, consumer, msg_id, type, payload, headers, retry_count, reason, created_at,
       first_failed_at, failed_at
  FROM pglogq.dlq_show(%s)
"""
DLQ_COUNT: LiteralString = "SELECT pglogq.dlq_count(%(queue)s, %(consumer)s, %(type)s, %(older_than)s)"
DLQ_REPLAY_ALL: LiteralString = """
SELECT pglogq.dlq_replay_all(%(queue)s, %(consumer)s, %(type)s, %(older_than)s, max_rows => %(limit)s)
"""
DLQ_PURGE: LiteralString = "SELECT pglogq.dlq_purge(%(queue)s, %(consumer)s, %(type)s, %(older_than)s)"

# pglogq send: payloads go as JSON text (cast by the server), so they arrive exactly as typed
SEND_TEXT: LiteralString = """
SELECT pglogq.send(%(queue)s, %(payload)s::jsonb, type => %(type)s, headers => %(headers)s::jsonb,
                   priority => %(priority)s, idempotency_key => %(key)s, delay => %(delay)s)
"""
SEND_KEYED_TEXT: LiteralString = """
SELECT pglogq.send_keyed(%(queue)s, %(payload)s::jsonb, %(event_key)s, type => %(type)s,
                         headers => %(headers)s::jsonb, priority => %(priority)s,
                         idempotency_key => %(key)s, delay => %(delay)s)
"""
SEND_BATCH_TEXT: LiteralString = """
SELECT pglogq.send_batch_keyed(%(queue)s, %(payload)s::jsonb, %(event_keys)s, type => %(type)s,
                               headers => %(headers)s::jsonb, priority => %(priority)s, delay => %(delay)s)
"""

# receive with payload and headers as jsonb (the CLI's connection reads them as raw JSON text)
RECEIVE_RAW: LiteralString = (
    "SELECT batch_id, msg_id, type, payload, headers, retry_count, created_at, priority,"
    " txid::pg_catalog.text FROM pglogq.receive(%s, %s, %s, %s)"
)
