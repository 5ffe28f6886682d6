"""SQL the command line issues itself (everything else goes through :class:`pglogq.Client`).

These are admin reads (the ``pglogq_admin`` role may read every pglogq table) and calls with
named arguments to functions whose newer parameters the client does not expose yet.
"""

from __future__ import annotations

from typing_extensions import LiteralString

QUEUE_CONFIG: LiteralString = """
SELECT paused, rotation_period, ticker_max_count, ticker_max_lag, ticker_idle_period,
       batch_max_events, big_batch_events, max_retries, retry_delay, max_payload_bytes,
       idempotency_window, dead_interval, max_consumer_lag
  FROM pglogq.queue WHERE queue_name = %s
"""
STORED_EVENTS: LiteralString = """
SELECT count(*) FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue
 WHERE q.queue_name = %s
"""
IN_FLIGHT_EXISTS: LiteralString = "SELECT to_regclass('pglogq.in_flight') IS NOT NULL"
IN_FLIGHT: LiteralString = "SELECT * FROM pglogq.in_flight"
TICKER_STATE: LiteralString = "SELECT last_run_at FROM pglogq.ticker_state"
SERVER_INFO: LiteralString = (
    "SELECT current_database(), current_setting('server_version'), current_user, now()"
)

DLQ_INSPECT: LiteralString = """
SELECT dead_id, queue, consumer, msg_id, type, payload, headers, retry_count, reason, created_at,
       first_failed_at, failed_at
  FROM pglogq.dlq_inspect(%(queue)s, consumer_name => %(consumer)s, max_rows => %(limit)s,
                          msg_type => %(type)s, older_than => %(older_than)s)
"""
DLQ_SHOW: LiteralString = """
SELECT d.dead_id, q.queue_name, s.consumer_name, d.msg_id, d.ev_type, d.ev_payload, d.ev_headers,
       d.retry_count, d.reason, d.ev_time, d.first_failed_at, d.failed_at
  FROM pglogq.dead_letter d
  JOIN pglogq.queue q ON q.queue_id = d.queue_id
  JOIN pglogq.subscription s ON s.sub_id = d.sub_id
 WHERE d.dead_id = %s
"""
DLQ_IDS: LiteralString = """
SELECT dead_id FROM pglogq.dlq_inspect(%(queue)s, consumer_name => %(consumer)s, max_rows => 100000,
                                       msg_type => %(type)s, older_than => %(older_than)s)
"""
DLQ_COUNT: LiteralString = """
SELECT count(*) FROM pglogq.dead_letter d
  JOIN pglogq.queue q ON q.queue_id = d.queue_id
  JOIN pglogq.subscription s ON s.sub_id = d.sub_id
 WHERE q.queue_name = %(queue)s
   AND (%(consumer)s::text IS NULL OR s.consumer_name = %(consumer)s)
   AND (%(type)s::text IS NULL OR d.ev_type = %(type)s)
   AND (%(older_than)s::interval IS NULL OR d.failed_at <= clock_timestamp() - %(older_than)s::interval)
"""
DLQ_REPLAY_IDS: LiteralString = (
    "SELECT count(pglogq.dlq_replay(i)) FROM unnest(%s::bigint[]) AS i"
)
DLQ_REPLAY_ONE: LiteralString = "SELECT pglogq.dlq_replay(%s)"
DLQ_PURGE: LiteralString = """
SELECT pglogq.dlq_purge(%(queue)s, older_than => %(older_than)s, consumer_name => %(consumer)s,
                        msg_type => %(type)s)
"""

# pglogq send: payloads go as JSON text (cast by the server), so they arrive exactly as typed
SEND_TEXT: LiteralString = """
SELECT pglogq.send(%(queue)s, %(payload)s::jsonb, type => %(type)s, headers => %(headers)s::jsonb,
                   priority => %(priority)s, idempotency_key => %(key)s, delay => %(delay)s)
"""
SEND_BATCH_TEXT: LiteralString = """
SELECT pglogq.send_batch_json(%(queue)s, %(payload)s::jsonb, type => %(type)s, headers => %(headers)s::jsonb,
                              priority => %(priority)s, delay => %(delay)s)
"""

# receive with payload and headers as jsonb (the CLI's connection reads them as raw JSON text)
RECEIVE_RAW: LiteralString = (
    "SELECT batch_id, msg_id, type, payload, headers, retry_count, created_at, priority,"
    " txid::pg_catalog.text FROM pglogq.receive(%s, %s, %s, %s)"
)
