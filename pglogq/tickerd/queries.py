"""Every SQL statement the ticker issues, in one place."""

from __future__ import annotations

from typing_extensions import LiteralString

# One active ticker per database: a session-level advisory lock on the ticking connection.
# A bigint key (shows in pg_locks as classid = high half, objid = low half, objsubid = 1).
LOCK_KEY = 0x70676C6F67710001
LOCK_CLASSID = LOCK_KEY >> 32
LOCK_OBJID = LOCK_KEY & 0xFFFFFFFF

TRY_LOCK: LiteralString = "SELECT pg_try_advisory_lock(%s)"
LOCK_HOLDER: LiteralString = (
    "SELECT a.pid, a.application_name, coalesce(host(a.client_addr), 'local'), a.backend_start"
    "  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s"
    "   AND l.objsubid = 1"
    "   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
SCHEMA_READY: LiteralString = (
    "SELECT to_regprocedure('pglogq.ticker(text)') IS NOT NULL,"
    " to_regprocedure('pglogq.ticker_check(boolean)') IS NOT NULL,"
    # ticker_sleep present and callable (a role granted ticker() alone polls, as before it)
    " coalesce(has_function_privilege(to_regprocedure('pglogq.ticker_sleep(boolean)'), 'EXECUTE'), false),"
    " to_regprocedure('pglogq.schedule_due(integer)') IS NOT NULL"
    " AND to_regprocedure('pglogq.maint_next_due()') IS NOT NULL"
)
SESSION_TIMEOUTS: LiteralString = (
    "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false)"
)
SYNCHRONOUS_COMMIT: LiteralString = "SELECT set_config('synchronous_commit', %s, false)"
# the ticking session runs each pglogq.ticker() call in an autocommit transaction of its own:
# said to the SQL, a pass after its own keep-alive commit needs no read of the queues (ticker.sql)
TICKER_AUTOCOMMIT: LiteralString = "SELECT set_config('pglogq.ticker_autocommit', 'on', false)"
TICKER: LiteralString = "SELECT pglogq.ticker()"
# the daemon's poll: the ticks written, how many of them closed events (NULL: a schema of before
# the setting, every tick counts), and where the next call goes on ('0' or NULL: this one looked
# at every queue with something due; else it was cut short).  OFFSET 0 keeps ticker() in a
# subquery of its own, run before the settings are read
TICKER_POLL: LiteralString = (
    "SELECT n, current_setting('pglogq.ticker_flow', true), current_setting('pglogq.ticker_next', true),"
    # seconds until the soonest keep-alive falls due (NULL: unknown, or a queue may fall due by
    # time alone): the third part of ticker()'s shortcut state, kept by its last whole pass
    " nullif(split_part(current_setting('pglogq.ticker_seen', true), '/', 3), '')::float8"
    "   - extract(epoch FROM clock_timestamp())::float8"
    " FROM (SELECT pglogq.ticker() AS n OFFSET 0) t"
)
# fall asleep (true: no send in flight; every later one notifies) or wake up (see ticker_sleep.sql)
TICKER_SLEEP: LiteralString = "SELECT pglogq.ticker_sleep(%s)"
TICKER_CHECK: LiteralString = (
    "SELECT system_id::text, previous_system_id::text, current_txid::text, max_txid_seen::text, status"
    " FROM pglogq.ticker_check(%s)"
)
# the steps due, 'schedules' when a schedule is due (or not planned yet: the daemon runs
# pglogq.schedules.fire_due only then), and a last row with op NULL: the seconds until a step
# falls due by time alone (NULL: none waits).  One statement a pass when nothing is due
MAINT_OPERATIONS: LiteralString = (
    "SELECT op, queue_name, NULL::float8 FROM pglogq.maint_operations()"
    " UNION ALL (SELECT 'schedules', NULL, NULL FROM pglogq.schedule_due(1))"
    " UNION ALL SELECT NULL, NULL, extract(epoch FROM pglogq.maint_next_due() - clock_timestamp())::float8"
)
MAINT_RUN: LiteralString = "SELECT pglogq.maint_run(%s, %s)"
QUEUE_INFO: LiteralString = (
    "SELECT queue_name, paused, last_tick_id, extract(epoch FROM last_tick_age)::float8,"
    " extract(epoch FROM ticker_lag)::float8, events_per_second, pending_estimate, consumers,"
    " retry_depth, dead_letters, delayed, size_bytes,"
    " extract(epoch FROM clock_timestamp() - last_rotation)::float8, rotation_blocked_by"
    " FROM pglogq.queue_info(NULL)"
)
CONSUMER_INFO: LiteralString = (
    "SELECT queue_name, consumer_name, extract(epoch FROM lag)::float8, lag_events, pending_events,"
    " extract(epoch FROM clock_timestamp() - last_seen)::float8, workers, open_batches,"
    " retry_depth, dead_letters, extract(epoch FROM clock_timestamp() - batch_open_since)::float8,"
    " in_flight_events, extract(epoch FROM oldest_in_flight)::float8, expired_leases, redelivered"
    " FROM pglogq.consumer_info(NULL, NULL)"
)
# the leases of share consumers, for the histogram of their delivery counts
SHARE_LEASES: LiteralString = (
    "SELECT queue_name, consumer_name, max_delivery_count FROM pglogq.leases(NULL, NULL)"
    " WHERE max_delivery_count IS NOT NULL"
)
# workers with events in flight: the longest silence (no heartbeat, no progress) of each
IN_FLIGHT_SILENCE: LiteralString = (
    "SELECT queue_name, consumer_name, worker, extract(epoch FROM max(silent_for))::float8, count(*)"
    " FROM pglogq.in_flight GROUP BY 1, 2, 3"
)

BACKEND_PID: LiteralString = "SELECT pg_catalog.pg_backend_pid()"
