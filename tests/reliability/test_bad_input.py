"""Bad input, refused cleanly: every row of TABLE gets its documented SQLSTATE, exception class or
exit code, and leaves the database exactly as it was (all pglogq tables compared before/after).

The table is rendered into docs/reference/bad-input.md; ``test_reference_page_is_current``
fails when the page drifts (regenerate it with ``PGLOGQ_WRITE_DOCS=1 pytest
tests/reliability/test_bad_input.py -k reference``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pglogq
from pglogq import schema
from pglogq.cli import main as cli_main
from tests.support.paths import REPO

DOC = REPO / "docs" / "reference" / "bad-input.md"


@dataclass
class World:
    """One database shared by every row: queues with events, an open batch, a retry, a delayed
    event and a dead letter, so that "nothing changed" has something to lose."""

    dsn: str
    conn: psycopg.Connection[Any]
    client: pglogq.Client
    batch_id: int
    msg: pglogq.Message


@dataclass(frozen=True)
class Bad:
    slug: str
    surface: str  # SQL | Python | CLI
    category: str
    what: str
    expect: str  # SQLSTATE, exception class name, or "exit N"
    run: Callable[[World], Any]
    function: str | None = None  # the SQL function whose header documents the SQLSTATE


def sql(stmt: str, *params: Any, isolation: str | None = None) -> Callable[[World], Any]:
    def go(w: World) -> Any:
        args = tuple(p(w) if callable(p) else p for p in params)
        if isolation is None:
            return w.conn.execute(stmt.encode(), args).fetchall()
        w.conn.execute(f"BEGIN ISOLATION LEVEL {isolation}".encode())
        try:
            return w.conn.execute(stmt.encode(), args).fetchall()
        finally:
            w.conn.execute("ROLLBACK")

    return go


def cli(*args: str) -> Callable[[World], Any]:
    def go(w: World) -> Any:
        return CliRunner().invoke(cli_main, ["--dsn", w.dsn, *args], prog_name="pglogq")

    return go


def big(n: int) -> dict[str, str]:
    return {"blob": "x" * n}


def stale(w: World) -> int:
    return w.batch_id - 1  # issued just before c's batch (to the dead-letter queue's consumer), acknowledged since


LONG49 = "q" * 49
LONG64 = "c" * 64

TABLE: list[Bad] = [
    # -- names ---------------------------------------------------------------------------------
    Bad("queue-empty", "SQL", "names", "create_queue('')", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", ""), "create_queue"),
    Bad("queue-null", "SQL", "names", "create_queue(NULL)", "PQ004",
        sql("SELECT pglogq.create_queue(NULL)"), "create_queue"),
    Bad("queue-too-long", "SQL", "names", "queue name of 49 bytes (limit 48)", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", LONG49), "create_queue"),
    Bad("queue-multibyte", "SQL", "names", "queue name 'café' (multibyte)", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", "café"), "create_queue"),
    Bad("queue-emoji", "SQL", "names", "queue name with an emoji", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", "q\U0001f600"), "create_queue"),
    Bad("queue-double-quote", "SQL", "names", "queue name with a double quote", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", 'a"b'), "create_queue"),
    Bad("queue-single-quote", "SQL", "names", "queue name with a single quote", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", "a'b"), "create_queue"),
    Bad("queue-semicolon-sql", "SQL", "names", "queue name 'x; DROP TABLE pglogq.queue'", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", "x; DROP TABLE pglogq.queue"), "create_queue"),
    Bad("queue-leading-space", "SQL", "names", "queue name ' q' (leading whitespace)", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", " q"), "create_queue"),
    Bad("queue-tab", "SQL", "names", "queue name with a tab", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", "a\tb"), "create_queue"),
    Bad("queue-digit-first", "SQL", "names", "queue name starting with a digit", "PQ004",
        sql("SELECT pglogq.create_queue(%s)", "1q"), "create_queue"),
    Bad("consumer-empty", "SQL", "names", "subscribe('q', '')", "PQ004",
        sql("SELECT pglogq.subscribe('q', %s)", ""), "subscribe"),
    Bad("consumer-null", "SQL", "names", "subscribe('q', NULL)", "PQ004",
        sql("SELECT pglogq.subscribe('q', NULL)"), "subscribe"),
    Bad("consumer-too-long", "SQL", "names", "consumer name of 64 bytes (limit 63)", "PQ004",
        sql("SELECT pglogq.subscribe('q', %s)", LONG64), "subscribe"),
    Bad("consumer-sql", "SQL", "names", "consumer name \"c'); DELETE FROM pglogq.subscription; --\"", "PQ004",
        sql("SELECT pglogq.subscribe('q', %s)", "c'); DELETE FROM pglogq.subscription; --"), "subscribe"),
    Bad("consumer-multibyte", "SQL", "names", "consumer name 'naïve'", "PQ004",
        sql("SELECT pglogq.subscribe('q', %s)", "naïve"), "subscribe"),
    Bad("unsubscribe-space", "SQL", "names", "unsubscribe('q', 'c ')", "PQ004",
        sql("SELECT pglogq.unsubscribe('q', %s)", "c "), "unsubscribe"),
    Bad("worker-bad", "SQL", "names", "receive(..., worker_name => 'w 1!')", "PQ004",
        sql("SELECT * FROM pglogq.receive('q', 'idle', 10, %s)", "w 1!"), "receive"),
    Bad("queue-unknown", "SQL", "names", "send to a queue that does not exist", "PQ001",
        sql("SELECT pglogq.send(%s, '{}')", "nope"), "send"),
    Bad("queue-null-send", "SQL", "names", "send(NULL, ...)", "PQ001",
        sql("SELECT pglogq.send(NULL, '{}')"), "send"),
    Bad("consumer-unknown", "SQL", "names", "receive for a consumer that does not exist", "PQ002",
        sql("SELECT * FROM pglogq.receive('q', %s)", "ghost"), "receive"),
    Bad("info-queue-unknown", "SQL", "names", "consumer_info for a queue that does not exist", "PQ001",
        sql("SELECT * FROM pglogq.consumer_info(%s)", "nope"), "consumer_info"),
    Bad("info-consumer-unknown", "SQL", "names", "consumer_info for a consumer that does not exist", "PQ002",
        sql("SELECT * FROM pglogq.consumer_info('q', %s)", "ghost"), "consumer_info"),
    Bad("info-consumer-nowhere", "SQL", "names", "consumer_info(NULL, consumer) for a consumer of no queue",
        "PQ002", sql("SELECT * FROM pglogq.consumer_info(NULL, %s)", "ghost"), "consumer_info"),
    Bad("drop-in-use", "SQL", "names", "drop_queue of a queue with consumers, without force", "PQ013",
        sql("SELECT pglogq.drop_queue('q')"), "drop_queue"),
    # -- payloads ------------------------------------------------------------------------------
    Bad("payload-null", "SQL", "payloads", "send('q', NULL)", "PQ007",
        sql("SELECT pglogq.send('q', NULL)"), "send"),
    Bad("payload-over-cap", "SQL", "payloads", "payload over the queue's max_payload_bytes (1000)", "PQ006",
        sql("SELECT pglogq.send('q', %s)", Jsonb(big(5000))), "send"),
    Bad("payload-invalid-json", "SQL", "payloads", "payload '{bad' (invalid JSON text)", "22P02",
        sql("SELECT pglogq.send('q', %s::text::jsonb)", "{bad")),
    Bad("payload-nul", "SQL", "payloads", "payload containing \\u0000 (NUL)", "22P05",
        sql("SELECT pglogq.send('q', %s::text::jsonb)", '{"a": "\\u0000"}')),
    Bad("headers-array", "SQL", "payloads", "headers '[1]' (not an object)", "PQ007",
        sql("SELECT pglogq.send('q', '{}', headers => '[1]')"), "send"),
    Bad("headers-scalar", "SQL", "payloads", "headers '\"x\"' (not an object)", "PQ007",
        sql("SELECT pglogq.send('q', '{}', headers => '\"x\"')"), "send"),
    Bad("type-empty", "SQL", "payloads", "event type ''", "PQ007",
        sql("SELECT pglogq.send('q', '{}', type => '')"), "send"),
    Bad("type-too-long", "SQL", "payloads", "event type of 256 bytes", "PQ007",
        sql("SELECT pglogq.send('q', '{}', type => %s)", "t" * 256), "send"),
    Bad("batch-null-element", "SQL", "payloads", "send_batch with a NULL element", "PQ007",
        sql("SELECT pglogq.send_batch('q', ARRAY['{}'::jsonb, NULL])"), "send_batch"),
    Bad("batch-one-too-big", "SQL", "payloads", "send_batch whose 2nd element is over the cap", "PQ006",
        sql("SELECT pglogq.send_batch('q', ARRAY['{}'::jsonb, %s])", Jsonb(big(5000))), "send_batch"),
    Bad("batch-json-not-array", "SQL", "payloads", "send_batch_json with an object, not an array", "PQ007",
        sql("SELECT pglogq.send_batch_json('q', '{\"a\": 1}')"), "send_batch_json"),
    # -- sizes ---------------------------------------------------------------------------------
    Bad("priority-negative", "SQL", "sizes", "priority -1", "PQ019",
        sql("SELECT pglogq.send('q', '{}', priority => -1)"), "send"),
    Bad("priority-huge", "SQL", "sizes", "priority 40000", "PQ019",
        sql("SELECT pglogq.send('q', '{}', priority => 40000)"), "send"),
    Bad("max-messages-zero", "SQL", "sizes", "receive max_messages 0", "PQ019",
        sql("SELECT * FROM pglogq.receive('q', 'idle', 0)"), "receive"),
    Bad("max-messages-huge", "SQL", "sizes", "receive max_messages 100001", "PQ019",
        sql("SELECT * FROM pglogq.receive('q', 'idle', 100001)"), "receive"),
    Bad("max-messages-null", "SQL", "sizes", "receive max_messages NULL", "PQ019",
        sql("SELECT * FROM pglogq.receive('q', 'idle', NULL)"), "receive"),
    Bad("share-window-zero", "SQL", "sizes", "set_share_window size 0", "PQ019",
        sql("SELECT pglogq.set_share_window('q', 'c', 0)"), "set_share_window"),
    Bad("share-window-ordinary", "SQL", "sizes", "set_share_window of an ordinary consumer", "PQ093",
        sql("SELECT pglogq.set_share_window('q', 'c', 10)"), "set_share_window"),
    Bad("batch-too-many", "SQL", "sizes", "send_batch of 100001 events", "PQ019",
        sql("SELECT pglogq.send_batch('q', array_fill('{}'::jsonb, ARRAY[100001]))"), "send_batch"),
    Bad("keys-length", "SQL", "sizes", "send_batch with 1 idempotency key for 2 payloads", "PQ019",
        sql("SELECT pglogq.send_batch('q', ARRAY['{}'::jsonb, '{}'], idempotency_keys => ARRAY['k'])"),
        "send_batch"),
    Bad("key-empty", "SQL", "sizes", "idempotency key ''", "PQ019",
        sql("SELECT pglogq.send('q', '{}', idempotency_key => '')"), "send"),
    Bad("dlq-rows-negative", "SQL", "sizes", "dlq_inspect max_rows -1", "PQ019",
        sql("SELECT * FROM pglogq.dlq_inspect('q', max_rows => -1)"), "dlq_inspect"),
    Bad("dlq-replay-rows-zero", "SQL", "sizes", "dlq_replay_all max_rows 0", "PQ019",
        sql("SELECT pglogq.dlq_replay_all('q', max_rows => 0)"), "dlq_replay_all"),
    Bad("dlq-replay-rows-negative", "SQL", "sizes", "dlq_replay_all max_rows -1", "PQ019",
        sql("SELECT pglogq.dlq_replay_all('q', max_rows => -1)"), "dlq_replay_all"),
    # -- delays --------------------------------------------------------------------------------
    Bad("delay-negative", "SQL", "delays", "send delay '-1 second'", "PQ011",
        sql("SELECT pglogq.send('q', '{}', delay => '-1 second')"), "send"),
    Bad("delay-absurd", "SQL", "delays", "send delay '20 years'", "PQ011",
        sql("SELECT pglogq.send('q', '{}', delay => '20 years')"), "send"),
    Bad("delay-and-deliver-at", "SQL", "delays", "send with both deliver_at and delay", "PQ011",
        sql("SELECT pglogq.send('q', '{}', deliver_at => now() + '1 h', delay => '1 h')"), "send"),
    Bad("deliver-at-infinity", "SQL", "delays", "deliver_at 'infinity'", "PQ011",
        sql("SELECT pglogq.send('q', '{}', deliver_at => 'infinity')"), "send"),
    Bad("retry-after-negative", "SQL", "delays", "nack retry_after '-1 second'", "PQ011",
        sql("SELECT pglogq.nack(%s, %s, '-1 second')", lambda w: w.batch_id, lambda w: w.msg.msg_id), "nack"),
    Bad("retry-after-absurd", "SQL", "delays", "nack retry_after '2 years'", "PQ011",
        sql("SELECT pglogq.nack(%s, %s, '2 years')", lambda w: w.batch_id, lambda w: w.msg.msg_id), "nack"),
    # -- ids -----------------------------------------------------------------------------------
    Bad("ack-null", "SQL", "ids", "ack(NULL)", "PQ008", sql("SELECT pglogq.ack(NULL)"), "ack"),
    Bad("ack-negative", "SQL", "ids", "ack(-5)", "PQ008", sql("SELECT pglogq.ack(-5)"), "ack"),
    Bad("ack-unknown-holder", "SQL", "ids", "ack of a batch id never issued (2^63 - 1)", "PQ008",
        sql("SELECT pglogq.ack(%s)", (1 << 63) - 1), "ack"),
    Bad("ack-stale", "SQL", "ids", "ack of a batch acknowledged already", "PQ009",
        sql("SELECT pglogq.ack(%s)", stale), "ack"),
    Bad("nack-stale", "SQL", "ids", "nack of a batch acknowledged already", "PQ009",
        sql("SELECT pglogq.nack(%s, %s)", stale, lambda w: w.msg.msg_id), "nack"),
    Bad("nack-unknown-msg", "SQL", "ids", "nack of a message not in the returned page", "PQ010",
        sql("SELECT pglogq.nack(%s, 999999)", lambda w: w.batch_id), "nack"),
    Bad("heartbeat-negative", "SQL", "ids", "heartbeat(-1)", "PQ008",
        sql("SELECT pglogq.heartbeat(-1)"), "heartbeat"),
    Bad("dlq-replay-unknown", "SQL", "ids", "dlq_replay(-1)", "PQ012",
        sql("SELECT pglogq.dlq_replay(-1)"), "dlq_replay"),
    Bad("cancel-unknown", "SQL", "ids", "cancel of an id the queue never issued", "PQ021",
        sql("SELECT pglogq.cancel('q', 999999)"), "cancel"),
    Bad("seek-no-position", "SQL", "ids", "seek with neither to_position nor by_events", "PQ019",
        sql("SELECT * FROM pglogq.seek('q', 'idle')"), "seek"),
    Bad("seek-garbage", "SQL", "ids", "seek to_position 'garbage'", "PQ019",
        sql("SELECT * FROM pglogq.seek('q', 'idle', to_position => 'garbage')"), "seek"),
    Bad("seek-out-of-range", "SQL", "ids", "seek to a tick that is not kept", "PQ017",
        sql("SELECT * FROM pglogq.seek('q', 'idle', to_position => '999999')"), "seek"),
    Bad("seek-open-batch", "SQL", "ids", "seek a consumer with an open batch, without force", "PQ016",
        sql("SELECT * FROM pglogq.seek('q', 'c', to_position => 'latest')"), "seek"),
    # -- configs -------------------------------------------------------------------------------
    Bad("config-unknown", "SQL", "configs", "set_queue_config('q', 'nope', '1')", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'nope', '1')"), "set_queue_config"),
    Bad("config-retries-huge", "SQL", "configs", "max_retries 2^31", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'max_retries', '2147483648')"), "set_queue_config"),
    Bad("config-retries-negative", "SQL", "configs", "max_retries -1", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'max_retries', '-1')"), "set_queue_config"),
    Bad("config-retries-null", "SQL", "configs", "max_retries NULL", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'max_retries', NULL)"), "set_queue_config"),
    Bad("config-period-zero", "SQL", "configs", "rotation_period '0'", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'rotation_period', '0')"), "set_queue_config"),
    Bad("config-lag-text", "SQL", "configs", "ticker_max_lag 'soon'", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'ticker_max_lag', 'soon')"), "set_queue_config"),
    Bad("config-bool", "SQL", "configs", "paused 'maybe'", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'paused', 'maybe')"), "set_queue_config"),
    Bad("config-overflow", "SQL", "configs", "max_payload_bytes 99999999999", "PQ005",
        sql("SELECT pglogq.set_queue_config('q', 'max_payload_bytes', '99999999999')"), "set_queue_config"),
    Bad("maint-op-sql", "SQL", "configs", "maint_run('drop table pglogq.queue')", "PQ019",
        sql("SELECT pglogq.maint_run('drop table pglogq.queue', 'q')"), "maint_run"),
    Bad("tick-in-rr", "SQL", "configs", "force_tick inside a REPEATABLE READ transaction", "PQ014",
        sql("SELECT pglogq.force_tick('q')", isolation="REPEATABLE READ"), "force_tick"),
    Bad("ticker-unknown-queue", "SQL", "configs", "ticker('nope')", "PQ001",
        sql("SELECT pglogq.ticker('nope')"), "ticker"),
    Bad("capture-catalog", "SQL", "names", "capture_table('pg_class', 'q')", "PQ070",
        sql("SELECT pglogq.capture_table('pg_class', 'q')"), "capture_table"),
    Bad("capture-own-table", "SQL", "names", "capture_table('pglogq.queue', 'q')", "PQ070",
        sql("SELECT pglogq.capture_table('pglogq.queue', 'q')"), "capture_table"),
    # -- Python client -------------------------------------------------------------------------
    Bad("py-queue-empty", "Python", "names", "Client.create_queue('')", "InvalidName",
        lambda w: w.client.create_queue("")),
    Bad("py-share-window-float", "Python", "sizes", "Client.set_share_window('q', 'c', 2.5)", "InvalidArgument",
        lambda w: w.client.set_share_window("q", "c", 2.5)),  # type: ignore[arg-type]
    Bad("py-consumer-quote", "Python", "names", "Client.subscribe('q', \"o'brien\")", "InvalidName",
        lambda w: w.client.subscribe("q", "o'brien")),
    Bad("py-queue-unknown", "Python", "names", "Client.send('nope', {})", "UnknownQueue",
        lambda w: w.client.send("nope", {})),
    Bad("py-payload-too-large", "Python", "payloads", "Client.send of a 5000-byte payload", "PayloadTooLarge",
        lambda w: w.client.send("q", big(5000))),
    Bad("py-payload-nan", "Python", "payloads", "Client.send({'x': NaN}) (not valid JSON)", "InvalidPayload",
        lambda w: w.client.send("q", {"x": float("nan")})),
    Bad("py-payload-nul", "Python", "encodings", "Client.send({'a': '\\x00'}) (NUL in a JSON string)",
        "InvalidPayload", lambda w: w.client.send("q", {"a": "\x00"})),
    Bad("py-payload-object", "Python", "payloads", "Client.send(object()) (not JSON-serialisable)", "InvalidPayload",
        lambda w: w.client.send("q", object())),
    Bad("py-headers-list", "Python", "payloads", "Client.send(headers=[1])", "InvalidPayload",
        lambda w: w.client.send("q", {}, headers=[1])),  # type: ignore[arg-type]
    Bad("py-name-nul", "Python", "encodings", "Client.create_queue('a\\x00b') (NUL in a name)", "InvalidName",
        lambda w: w.client.create_queue("a\x00b")),
    Bad("py-name-surrogate", "Python", "encodings", "Client.create_queue('\\ud800') (lone surrogate)",
        "InvalidName", lambda w: w.client.create_queue("\ud800")),
    Bad("py-max-messages", "Python", "sizes", "Client.receive(max_messages=0)", "InvalidArgument",
        lambda w: w.client.receive("q", "idle", max_messages=0)),
    Bad("py-retry-after", "Python", "delays", "Client.nack(retry_after=-1 s)", "InvalidDelay",
        lambda w: w.client.nack(w.msg, retry_after=timedelta(seconds=-1))),
    Bad("py-delay", "Python", "delays", "Client.send(delay=-1 s)", "InvalidDelay",
        lambda w: w.client.send("q", {}, delay=timedelta(seconds=-1))),
    Bad("py-config", "Python", "configs", "Client.set_queue_config('q', 'max_retries', -1)", "InvalidConfig",
        lambda w: w.client.set_queue_config("q", "max_retries", -1)),
    Bad("py-ack-unknown", "Python", "ids", "Client.ack(12345)", "UnknownBatch",
        lambda w: w.client.ack(12345)),
    Bad("py-ack-stale", "Python", "ids", "Client.ack of a batch acknowledged already", "StaleBatch",
        lambda w: w.client.ack(stale(w))),
    Bad("py-dlq-unknown", "Python", "ids", "Client.dlq_replay(-1)", "UnknownDeadLetter",
        lambda w: w.client.dlq_replay(-1)),
    Bad("py-force-tick-all", "Python", "configs", "Client.tick(None, force=True)", "ValueError",
        lambda w: w.client.tick(None, force=True)),
    Bad("py-capture-columns-str", "Python", "names", "Client.capture_table('t', 'q', include_columns='id')",
        "InvalidCaptureColumns", lambda w: w.client.capture_table("t", "q", include_columns="id")),
    # -- command line --------------------------------------------------------------------------
    Bad("cli-queue-empty", "CLI", "names", "pglogq queue create ''", "exit 4", cli("queue", "create", "")),
    Bad("cli-capture-only-if", "CLI", "names", "pglogq capture add t q --only-if '{nope'", "exit 4",
        cli("capture", "add", "t", "q", "--only-if", "{nope")),
    Bad("cli-queue-semicolon", "CLI", "names", "pglogq queue create 'a;b'", "exit 4", cli("queue", "create", "a;b")),
    Bad("cli-consumer-space", "CLI", "names", "pglogq consumer subscribe q 'bad name'", "exit 4",
        cli("consumer", "subscribe", "q", "bad name")),
    Bad("cli-queue-unknown", "CLI", "names", "pglogq send nope '{}'", "exit 3", cli("send", "nope", "{}")),
    Bad("cli-consumer-unknown", "CLI", "names", "pglogq receive q ghost", "exit 3", cli("receive", "q", "ghost")),
    Bad("cli-payload-not-json", "CLI", "payloads", "pglogq send q 'not json'", "exit 4",
        cli("send", "q", "not json")),
    Bad("cli-payload-too-large", "CLI", "payloads", "pglogq send q <5000-byte payload>", "exit 4",
        cli("send", "q", '{"blob": "' + "x" * 5000 + '"}')),
    Bad("cli-type-empty", "CLI", "payloads", "pglogq send q '{}' --type ''", "exit 4",
        cli("send", "q", "{}", "--type", "")),
    Bad("cli-priority", "CLI", "sizes", "pglogq send q '{}' --priority 99999", "exit 2",
        cli("send", "q", "{}", "--priority", "99999")),
    Bad("cli-max-zero", "CLI", "sizes", "pglogq receive q c --max 0", "exit 2", cli("receive", "q", "c", "--max", "0")),
    Bad("cli-delay-negative", "CLI", "delays", "pglogq send q '{}' --delay -5s", "exit 2",
        cli("send", "q", "{}", "--delay", "-5s")),
    Bad("cli-config-negative", "CLI", "configs", "pglogq queue config q max_retries -- -1", "exit 4",
        cli("queue", "config", "q", "max_retries", "--", "-1")),
    Bad("cli-config-unknown", "CLI", "configs", "pglogq queue config q bogus 1", "exit 4",
        cli("queue", "config", "q", "bogus", "1")),
    Bad("cli-seek-garbage", "CLI", "ids", "pglogq consumer seek q idle --to garbage --execute", "exit 4",
        cli("consumer", "seek", "q", "idle", "--to", "garbage", "--execute")),
    Bad("cli-dlq-unknown", "CLI", "ids", "pglogq dlq replay 999999", "exit 3", cli("dlq", "replay", "999999")),
    # -- per-type settings, job lookup, schedules --------------------------------------
    Bad("type-config-unknown-param", "SQL", "jobs", "set_type_config('q', 't', 'speed', '1')", "PQ065",
        sql("SELECT pglogq.set_type_config('q', 't', 'speed', '1')"), "set_type_config"),
    Bad("type-config-negative-retries", "SQL", "jobs", "set_type_config('q', 't', 'max_retries', '-1')", "PQ065",
        sql("SELECT pglogq.set_type_config('q', 't', 'max_retries', '-1')"), "set_type_config"),
    Bad("type-config-null-type", "SQL", "jobs", "set_type_config('q', NULL, 'max_retries', '1')", "PQ065",
        sql("SELECT pglogq.set_type_config('q', NULL, 'max_retries', '1')"), "set_type_config"),
    Bad("lookup-unknown-id", "SQL", "jobs", "lookup('q', 2^63-1)", "PQ021",
        sql("SELECT * FROM pglogq.lookup('q', 9223372036854775807)"), "lookup"),
    Bad("jobs-bad-state", "SQL", "jobs", "jobs('q', in_state => 'running')", "PQ069",
        sql("SELECT * FROM pglogq.jobs('q', in_state => 'running')"), "jobs"),
    Bad("jobs-negative-limit", "SQL", "jobs", "jobs('q', max_rows => -1)", "PQ069",
        sql("SELECT * FROM pglogq.jobs('q', max_rows => -1)"), "jobs"),
    Bad("jobs-bad-cursor", "SQL", "jobs", "jobs('q', after => 'c/7/0/1')", "PQ069",
        sql("SELECT * FROM pglogq.jobs('q', after => 'c/7/0/1')"), "jobs"),
    Bad("schedule-bad-cron", "SQL", "jobs", "schedule_add('q', 's', 'every day', '{}')", "PQ066",
        sql("SELECT pglogq.schedule_add('q', 's', 'every day', '{}')"), "schedule_add"),
    Bad("schedule-unknown", "SQL", "jobs", "schedule_remove('q', 'nope')", "PQ067",
        sql("SELECT pglogq.schedule_remove('q', 'nope')"), "schedule_remove"),
    Bad("py-type-config", "Python", "jobs", "Client.set_type_config('q', 't', 'retry_factor', 0.5)",
        "InvalidTypeConfig", lambda w: w.client.set_type_config("q", "t", "retry_factor", 0.5)),
    Bad("py-lookup-zero", "Python", "jobs", "Client.lookup('q', 0)", "UnknownMessage",
        lambda w: w.client.lookup("q", 0)),
    Bad("py-jobs-limit", "Python", "jobs", "Client.jobs('q', limit=0)", "InvalidJobsQuery",
        lambda w: w.client.jobs("q", limit=0)),
    Bad("py-schedule-cron", "Python", "jobs", "Client.schedule_add('q', 's', '61 * * * *', {})", "InvalidSchedule",
        lambda w: w.client.schedule_add("q", "s", "61 * * * *", {})),
    Bad("cli-job-unknown", "CLI", "jobs", "pglogq job show q 999999", "exit 3", cli("job", "show", "q", "999999")),
    Bad("cli-jobs-limit", "CLI", "jobs", "pglogq jobs q --limit -1", "exit 2", cli("jobs", "q", "--limit", "-1")),
    Bad("cli-jobs-cursor", "CLI", "jobs", "pglogq jobs q --after garbage", "exit 4",
        cli("jobs", "q", "--after", "garbage")),
    Bad("cli-schedule-cron", "CLI", "jobs", "pglogq schedule add q s --cron '* * *' --payload '{}'", "exit 4",
        cli("schedule", "add", "q", "s", "--cron", "* * *", "--payload", "{}")),
    Bad("cli-schedule-unknown", "CLI", "jobs", "pglogq schedule remove q nope", "exit 3",
        cli("schedule", "remove", "q", "nope")),
    Bad("py-capture-bad-table-name", "Python", "names", "Client.capture_table('a.b.c.d', 'q')", "InvalidArgument",
        lambda w: w.client.capture_table("a.b.c.d", "q")),
    Bad("cli-capture-bad-table-name", "CLI", "names", "pglogq capture add 't1; drop table t1' q", "exit 4",
        cli("capture", "add", "t1; drop table t1", "q")),
]


# -- the shared database -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(server_dsn: str, template_db: str) -> Iterator[World]:
    name = f"pglogq_bad_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'.encode())
    dsn = make_conninfo(server_dsn, dbname=name)
    client = pglogq.Client(dsn)
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        # a dead letter on queue dq
        client.create_queue("dq")
        client.set_queue_config("dq", "max_retries", 1)
        client.subscribe("dq", "d")
        client.send("dq", {"poison": True})
        client.tick("dq", force=True)
        for _ in range(2):
            page = client.receive("dq", "d")
            assert len(page) == 1
            client.nack(page.messages[0], retry_after=timedelta(0))
            page.ack()
            client.maintain()
            client.tick("dq", force=True)
        assert len(client.dlq_inspect("dq")) == 1
        # queue q: a small payload cap, an open batch of c with a nacked event, a delayed event
        client.create_queue("q")
        client.set_queue_config("q", "max_payload_bytes", 1000)
        client.subscribe("q", "c")
        client.subscribe("q", "idle")
        client.send_batch("q", [{"n": i} for i in range(5)])
        client.send("q", {"later": True}, delay=timedelta(hours=1))
        client.tick("q", force=True)
        page = client.receive("q", "c", max_messages=3)
        assert len(page) == 3 and page.id is not None
        client.nack(page.messages[0], retry_after=timedelta(hours=1))
        for _ in range(2):  # idle passes the batch, so seek may move it
            p = client.receive("q", "idle", max_messages=100)
            if p:
                p.ack()
        yield World(dsn, conn, client, page.id, page.messages[1])
    finally:
        conn.close()
        client.close()
        with psycopg.connect(server_dsn, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """Every row of every pglogq table (partitions through their parent), and the relations."""
    out: dict[str, list[str]] = {}
    tables = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'pglogq'::regnamespace"
        " AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1"
    ).fetchall()
    for (table,) in tables:
        out[table] = sorted(r[0] for r in conn.execute(f"SELECT x::text FROM {table} x".encode()))
    out["<relations>"] = sorted(
        r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relnamespace = 'pglogq'::regnamespace")
    )
    return out


def documented_codes(function: str) -> set[str]:
    """SQLSTATEs named in a function's header comment (following "as send" references)."""
    text = (schema.sql_dir() / "functions" / f"{function}.sql").read_text()
    header = text.split("CREATE OR REPLACE FUNCTION", 1)[0]
    codes = set(re.findall(r"PQ\d{3}", header))
    for ref in re.findall(r"\bas (send_batch|send)\b", header):
        if ref != function:
            codes |= documented_codes(ref)
    return codes


def _exception_name(exc: BaseException) -> str:
    return type(exc).__name__


@pytest.mark.parametrize("bad", TABLE, ids=[b.slug for b in TABLE])
def test_bad_input_is_refused_and_changes_nothing(world: World, bad: Bad) -> None:
    before = snapshot(world.conn)
    if bad.surface == "SQL":
        with pytest.raises(psycopg.Error) as info:
            bad.run(world)
        assert info.value.sqlstate == bad.expect, (info.value.sqlstate, str(info.value))
        if bad.function is not None:
            assert bad.expect in documented_codes(bad.function), f"{bad.expect} not in {bad.function}.sql's header"
    elif bad.surface == "Python":
        with pytest.raises(Exception) as info:  # the exact class is checked below
            bad.run(world)
        assert _exception_name(info.value) == bad.expect, repr(info.value)
        if isinstance(info.value, pglogq.PglogqError):
            assert info.value.sqlstate and info.value.message
    else:
        result = bad.run(world)
        code = int(bad.expect.split()[1])
        assert result.exit_code == code, (result.exit_code, result.output)
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("pglogq: error: " if code != 2 else "Error: "), result.stderr
        assert "Traceback" not in result.output
    world.conn.execute("SELECT 1")  # the connection is still usable
    assert snapshot(world.conn) == before


def test_table_is_large_and_distinct() -> None:
    assert len(TABLE) >= 35
    assert len({b.slug for b in TABLE}) == len(TABLE)
    assert len({b.what for b in TABLE}) == len(TABLE)
    assert {b.surface for b in TABLE} == {"SQL", "Python", "CLI"}
    assert {"names", "payloads", "sizes", "delays", "ids", "configs", "encodings"} <= {b.category for b in TABLE}


def render_reference() -> str:
    lines = [
        "# Bad input: what is refused, and how",
        "",
        "<!-- generated from tests/reliability/test_bad_input.py (TABLE); do not edit by hand: run",
        "     PGLOGQ_WRITE_DOCS=1 pytest tests/reliability/test_bad_input.py -k reference -->",
        "",
        "Every input below is refused with the error shown, and **changes nothing**: the test",
        "`tests/reliability/test_bad_input.py` snapshots every row of every `pglogq` table before and after each",
        "case and compares them.  SQL errors carry their SQLSTATE (custom codes `PQnnn`, see",
        "`pglogq/errors.py`; the SQLSTATE of each SQL row is also checked against the `Raises:` line",
        "of the function's header); the Python client raises the class shown (a subclass of",
        "`pglogq.PglogqError` for every `PQnnn` code; PostgreSQL's own errors such as invalid JSON",
        "text stay psycopg errors; client-side errors are Python's); the command line exits with the",
        "code shown (see `pglogq/cli/errors.py`: 2 usage, 3 not found, 4 invalid input).",
        "",
        f"{len(TABLE)} cases.",
        "",
        "| # | surface | category | input | refused with |",
        "| - | ------- | -------- | ----- | ------------ |",
    ]
    for i, b in enumerate(TABLE, 1):
        what = b.what.replace("|", "\\|")
        expect = f"`{b.expect}`" if not b.expect.startswith("exit") else b.expect
        lines.append(f"| {i} | {b.surface} | {b.category} | {what} | {expect} |")
    lines += [
        "",
        "Notes:",
        "",
        "- Batch ids are capabilities: any role allowed to `ack` may ack any batch id it is given;",
        "  role separation (writers cannot ack at all) is tested in `tests/sql/test_security.py`.  An id",
        "  that is not its holder's current batch is refused (`PQ009`), so an old id cannot ack a newer",
        "  page.",
        "- Sequences are not compared: a refused send may consume a message id (sequences are not",
        "  transactional in PostgreSQL); ids are unique, not gapless.",
        "- pglogq takes no tick ids or sequences from outside (checklist item 18): ticks are numbered by",
        "  the ticker under a per-queue lock, and a tick whose snapshot would go backwards is refused",
        "  (`PQ015`, see `tests/sql/test_upgrade.py` for the restored-dump case).",
        "",
    ]
    return "\n".join(lines)


def test_reference_page_is_current() -> None:
    text = render_reference()
    if os.environ.get("PGLOGQ_WRITE_DOCS"):
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(text)
    assert DOC.read_text() == text, "docs/reference/bad-input.md is stale: regenerate it (see module docstring)"
