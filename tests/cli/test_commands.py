"""The `pglogq` command line, driven through click's runner against a real PostgreSQL."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import click
import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

import pglogq
from pglogq import schema
from pglogq.cli import main as cli_main
from pglogq.cli.errors import Exit
from pglogq.cli.lazy import LazyGroup
from pglogq.cli.params import parse_duration
from tests.support.cli import fails, js, ok, run
from tests.support.waiting import wait_for


@pytest.fixture
def raw_db(server_dsn: str) -> Iterator[str]:
    """A database without the pglogq schema."""
    name = f"pglogq_cli_raw_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stored(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
            " WHERE q.queue_name = %s", (queue,)).fetchone()
        return int(row[0]) if row else -1


# -- schema ---------------------------------------------------------------------------------


def test_schema_commands_on_an_installed_database(dsn: str) -> None:
    st = js(dsn, "schema", "status")
    assert st["installed"] is True and st["version"] == st["latest"] == schema.latest_version()
    assert st["pending"] == []
    assert js(dsn, "schema", "install")["applied"] == []
    assert js(dsn, "schema", "upgrade")["version"] == schema.latest_version()
    ok(dsn, "schema", "status", "--check")
    human = ok(dsn, "schema", "status").stdout
    assert "up to date" in human


def test_schema_sql_needs_no_database() -> None:
    r = CliRunner().invoke(cli_main, ["schema", "sql"], env={"PGLOGQ_DSN": "host=/nonexistent"})
    assert r.exit_code == 0
    assert r.stdout == schema.one_file_sql()
    assert "CREATE OR REPLACE FUNCTION pglogq.seek(" in r.stdout


def test_schema_install_into_an_empty_database(raw_db: str) -> None:
    st = js(raw_db, "schema", "status")
    assert st["installed"] is False and st["version"] is None and st["pending"]
    fails(raw_db, Exit.SCHEMA, "schema", "status", "--check")
    r = fails(raw_db, Exit.SCHEMA, "queue", "list")
    assert "pglogq schema install" in r.stderr
    fails(raw_db, Exit.SCHEMA, "schema", "upgrade")
    out = js(raw_db, "schema", "install")
    assert out["version"] == schema.latest_version() and out["applied"]
    assert js(raw_db, "queue", "list") == []


# -- queues ---------------------------------------------------------------------------------


def test_queue_lifecycle(dsn: str) -> None:
    out = js(dsn, "queue", "create", "orders", "--set", "ticker_max_lag=100ms", "--set", "max_retries=3")
    assert out == {"queue": "orders", "created": True, "config": {"ticker_max_lag": 0.1, "max_retries": 3}}
    assert js(dsn, "queue", "create", "orders")["created"] is False
    listed = js(dsn, "queue", "list")
    assert [q["queue_name"] for q in listed] == ["orders"]
    assert {"paused", "events_per_second", "last_tick_age", "size_bytes", "consumers"} <= set(listed[0])
    cfg = js(dsn, "queue", "config", "orders")["config"]
    assert cfg["ticker_max_lag"] == 0.1 and cfg["max_retries"] == 3 and cfg["paused"] is False
    assert js(dsn, "queue", "config", "orders", "batch_max_events", "500") == {
        "queue": "orders", "param": "batch_max_events", "value": 500}
    assert js(dsn, "queue", "config", "orders", "batch_max_events") == {
        "queue": "orders", "config": {"batch_max_events": 500}}
    assert js(dsn, "queue", "pause", "orders") == {"queue": "orders", "paused": True}
    assert js(dsn, "queue", "list")[0]["paused"] is True
    assert js(dsn, "queue", "resume", "orders") == {"queue": "orders", "paused": False}
    assert js(dsn, "queue", "list")[0]["paused"] is False
    human = ok(dsn, "queue", "list").stdout
    assert "orders" in human and max(len(line) for line in human.splitlines()) <= 80


def test_queue_drop_asks_refuses_and_respects_consumers(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    ok(dsn, "send", "orders", '{"a": 1}')
    # stdin is not a terminal under the runner: refused, nothing dropped
    r = fails(dsn, Exit.NOT_CONFIRMED, "queue", "drop", "orders")
    assert "--yes" in r.stderr
    assert js(dsn, "queue", "list")[0]["queue_name"] == "orders"
    r = fails(dsn, Exit.CONFLICT, "queue", "drop", "orders", "--yes")
    assert "--force" in r.stderr
    assert stored(dsn, "orders") == 1
    out = js(dsn, "queue", "drop", "orders", "--yes", "--force")
    assert out == {"queue": "orders", "dropped": True, "events": 1}
    assert js(dsn, "queue", "list") == []


def test_errors_are_one_line_with_their_exit_code(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    r = fails(dsn, Exit.NOT_FOUND, "send", "ordrs", '{"a": 1}')
    assert r.stderr.strip() == 'pglogq: error: unknown queue "ordrs"; did you mean "orders"?'
    assert "Traceback" not in r.stderr
    fails(dsn, Exit.NOT_FOUND, "receive", "orders", "nobody")
    fails(dsn, Exit.INVALID, "queue", "create", "bad name;")
    fails(dsn, Exit.INVALID, "queue", "config", "orders", "ticker_max_lag", "soon")
    fails(dsn, Exit.INVALID, "queue", "config", "orders", "bogus")
    fails(dsn, Exit.INVALID, "send", "orders", "{not json")
    fails(dsn, Exit.NOT_FOUND, "dlq", "show", "12345")
    usage = run(dsn, "queue", "frobnicate")
    assert usage.exit_code == Exit.USAGE
    # --debug adds the traceback, same exit code
    r = run(dsn, "send", "ordrs", '{"a": 1}', "--debug")
    assert r.exit_code == Exit.NOT_FOUND and "Traceback" in r.stderr


def test_connection_failure_exit_code(tmp_path: Path) -> None:
    r = fails(f"host={tmp_path} port=1 dbname=x connect_timeout=2", Exit.CONNECTION, "queue", "list")
    assert "cannot connect" in r.stderr and "password" not in r.stderr


def test_dsn_rule_env_and_root_option(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    r = run(None, "queue", "list", "--json", env={"PGLOGQ_DSN": dsn})
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["queue_name"] == "orders"
    r = CliRunner().invoke(cli_main, ["--dsn", dsn, "queue", "list", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["queue_name"] == "orders"
    # the command's own --dsn wins over PGLOGQ_DSN
    r = run(dsn, "queue", "list", "--json", env={"PGLOGQ_DSN": "host=/nonexistent dbname=nope"})
    assert r.exit_code == 0
    # an explicit DSN is not announced as the embedded server
    assert "embedded" not in r.stderr


# -- consumers ------------------------------------------------------------------------------


def test_consumer_subscribe_list_unsubscribe(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    assert js(dsn, "consumer", "subscribe", "orders", "billing")["subscribed"] is True
    assert js(dsn, "consumer", "subscribe", "orders", "billing")["subscribed"] is False
    ok(dsn, "consumer", "subscribe", "orders", "audit")
    listed = js(dsn, "consumer", "list", "orders")
    assert [c["consumer_name"] for c in listed] == ["audit", "billing"]
    assert {"lag", "lag_events", "pending_events", "last_seen", "open_batches"} <= set(listed[0])
    fails(dsn, Exit.NOT_CONFIRMED, "consumer", "unsubscribe", "orders", "audit")
    assert len(js(dsn, "consumer", "list")) == 2
    assert js(dsn, "consumer", "unsubscribe", "orders", "audit", "--yes")["unsubscribed"] is True
    assert [c["consumer_name"] for c in js(dsn, "consumer", "list")] == ["billing"]
    human = ok(dsn, "consumer", "list").stdout
    assert "billing" in human and max(len(line) for line in human.splitlines()) <= 80
    # unknown names: an unknown queue is "not found", an unknown consumer is "not subscribed"
    fails(dsn, Exit.NOT_FOUND, "consumer", "list", "nope")
    assert js(dsn, "consumer", "unsubscribe", "orders", "ghost", "--yes")["unsubscribed"] is False
    assert "is not subscribed" in ok(dsn, "consumer", "unsubscribe", "orders", "ghost", "--yes").stdout
    fails(dsn, Exit.NOT_FOUND, "consumer", "unsubscribe", "nope", "billing", "--yes")


# -- send / receive / tail ------------------------------------------------------------------


def test_send_options_and_receive(dsn: str) -> None:
    client = pglogq.Client(dsn)
    ok(dsn, "queue", "create", "orders")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    one = js(dsn, "send", "orders", '{"id": 1}', "--type", "order.created", "--header", "src=cli",
             "--header", "trace=a=b", "--priority", "150", "--key", "k-1")
    assert one["count"] == 1
    again = js(dsn, "send", "orders", '{"id": 1}', "--key", "k-1")
    assert again["ids"] == one["ids"]  # idempotency key: no second event
    lines = "".join(json.dumps({"id": i}) + "\n" for i in range(2, 7)) + "\n"
    many = js(dsn, "send", "orders", "--type", "bulk", "--batch-size", "2", input=lines)
    assert many["count"] == 5 and many["ids"] == sorted(many["ids"])
    later = js(dsn, "send", "orders", '"later"', "--delay", "1h")
    client.tick("orders", force=True)
    peek = js(dsn, "receive", "orders", "billing", "--peek", "--max", "3")
    assert [m["payload"]["id"] for m in peek] == [1, 2, 3]  # priority 150 first
    assert peek[0]["type"] == "order.created" and peek[0]["headers"] == {"src": "cli", "trace": "a=b"}
    assert peek[0]["priority"] == 150
    # peek does not acknowledge: the same page again
    assert js(dsn, "receive", "orders", "billing", "--peek", "--max", "3") == peek
    got = js(dsn, "receive", "orders", "billing", "--max", "4")
    assert [m["msg_id"] for m in got] == [m["msg_id"] for m in peek] + [many["ids"][2]]
    rest = js(dsn, "receive", "orders", "billing")
    assert [m["payload"]["id"] for m in rest] == [5, 6]
    assert later["ids"][0] not in [m["msg_id"] for m in got + rest]  # delayed by an hour
    assert js(dsn, "receive", "orders", "billing") == []
    assert "no events" in ok(dsn, "receive", "orders", "billing").stdout
    client.close()


def test_send_refuses_bad_stdin_lines(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    r = fails(dsn, Exit.INVALID, "send", "orders", "--batch-size", "2", input='{"a":1}\n{"a":2}\n{oops\n')
    # all or nothing: the lines before it were not sent either
    assert "line 3" in r.stderr and "nothing was sent" in r.stderr
    assert stored(dsn, "orders") == 0
    r = fails(dsn, Exit.INVALID, "send", "orders", input="nope\n")
    assert "nothing was sent" in r.stderr
    r = run(dsn, "send", "orders", "--key", "k", input='{"a":1}\n')
    assert r.exit_code == Exit.USAGE and "--key applies to a single PAYLOAD" in r.stderr


def test_human_receive_output(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    ok(dsn, "send", "orders", '{"id": 7}', "--type", "order.created")
    ok(dsn, "send", "orders", '"[bold]x[/bold]"', "--type", "[red]")
    pglogq.Client(dsn).tick("orders", force=True)
    out = ok(dsn, "receive", "orders", "billing").stdout
    assert "order.created" in out and '{"id":7}' in out and "2 event(s) received and acknowledged" in out
    assert "[bold]x[/bold]" in out and "[red]" in out  # data is printed as is, never as markup


def test_tail_follows_new_events_with_a_throwaway_subscription(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    client = pglogq.Client(dsn)
    client.send("orders", {"old": True})
    client.tick("orders", force=True)
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            wait_for(lambda: any(c.consumer_name.startswith("tail-") for c in client.consumer_info("orders")),
                     "tail to subscribe")
            client.send_batch("orders", [{"n": 1}, {"n": 2}], type="t")
            client.tick("orders", force=True)
            client.send("orders", {"n": 3}, type="t")
            client.tick("orders", force=True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=produce)
    t.start()
    r = run(dsn, "tail", "orders", "--max", "3", "--for", "120s", "--json")
    t.join()
    assert not errors
    assert r.exit_code == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["payload"] for e in events] == [{"n": 1}, {"n": 2}, {"n": 3}]  # not the old one
    # the throw-away consumer is gone; the real one is untouched
    assert [c.consumer_name for c in client.consumer_info("orders")] == ["billing"]
    assert len(client.receive("orders", "billing", max_messages=100)) == 4
    client.close()


def test_tail_stops_after_for_and_can_tick_itself(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    ok(dsn, "send", "orders", '{"n": 1}')
    pglogq.Client(dsn).tick("orders", force=True)
    r = ok(dsn, "tail", "orders", "--for", "0.5s", "--poll", "100ms", "--tick")
    assert r.stdout == ""  # ticked before the tail subscribed
    assert js(dsn, "consumer", "list") == []
    fails(dsn, Exit.NOT_FOUND, "tail", "nosuchqueue", "--for", "1s")


# -- status ---------------------------------------------------------------------------------


def test_status_json_and_warnings(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    ok(dsn, "queue", "create", "idle")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    st = js(dsn, "status")
    assert set(st) == {"queues", "consumers", "in_flight", "leases", "schedules", "schedules_total",
                       "ticker_last_run", "warnings"}
    assert st["schedules"] == []
    assert [q["queue_name"] for q in st["queues"]] == ["idle", "orders"]
    assert st["consumers"][0]["consumer_name"] == "billing"
    assert st["warnings"] == []
    ok(dsn, "status", "--check")
    # committed events nobody ticks: the ticker is stalled
    ok(dsn, "send", "orders", '{"a": 1}')
    st = js(dsn, "status", "--stall-after", "0s")
    assert [(w["kind"], w["queue"]) for w in st["warnings"]] == [("ticker_stalled", "orders")]
    r = fails(dsn, Exit.CHECK_FAILED, "status", "--stall-after", "0s", "--check")
    assert "ticker" in r.stderr
    ok(dsn, "queue", "pause", "idle")
    kinds = {w["kind"] for w in js(dsn, "status", "idle")["warnings"]}
    assert kinds == {"paused"}
    ok(dsn, "status", "idle", "--check")  # paused is information, not a problem
    # consumer behind and silent
    pglogq.Client(dsn).tick("orders", force=True)
    st = js(dsn, "status", "orders", "--stale-after", "0s")
    assert ("consumer_stale", "billing") in [(w["kind"], w["consumer"]) for w in st["warnings"]]
    human = ok(dsn, "status").stdout
    assert "Queues" in human and "Consumers" in human and "billing" in human
    assert max(len(line) for line in human.splitlines()) <= 80


def test_status_watch_refreshes(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders")
    r = ok(dsn, "status", "--watch", "0.05", "--count", "3", "--json")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(docs) == 3 and all(d["queues"][0]["queue_name"] == "orders" for d in docs)
    r = ok(dsn, "status", "--watch", "0.05", "--count", "2")
    assert r.stdout.count("pglogq status") == 2


def test_status_shows_in_flight_progress_when_the_view_exists(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        has_view = conn.execute("SELECT to_regclass('pglogq.in_flight') IS NOT NULL").fetchone()
    st = js(dsn, "status")
    if has_view and has_view[0]:
        assert st["in_flight"] == []
    else:
        assert st["in_flight"] is None


# -- dead letters ---------------------------------------------------------------------------


def make_dead_letters(dsn: str, n: int, *, consumer: str = "billing", type_: str = "bad") -> list[int]:
    """n events dead-lettered by ``consumer`` (max_retries 1: two nacks each)."""
    client = pglogq.Client(dsn)
    ids = client.send_batch("orders", [{"n": i} for i in range(n)], type=type_)
    for _ in range(2):
        client.maintain()
        client.tick("orders", force=True)
        while True:
            batch = client.receive("orders", consumer, max_messages=1000)
            if not batch:
                break
            for m in batch:
                if m.msg_id in ids:
                    batch.nack(m, retry_after=timedelta(0), reason="boom")
            batch.ack()
    client.close()
    return ids


def test_dlq_inspect_show_replay_purge(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders", "--set", "max_retries=1")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    ok(dsn, "consumer", "subscribe", "orders", "audit")
    bad = make_dead_letters(dsn, 3)
    other = make_dead_letters(dsn, 2, type_="worse")
    client = pglogq.Client(dsn)
    while batch := client.receive("orders", "audit"):  # audit handled them fine
        batch.ack()
    dead = js(dsn, "dlq", "inspect", "orders")
    assert sorted(d["msg_id"] for d in dead) == sorted(bad + other)
    assert {d["consumer"] for d in dead} == {"billing"} and dead[0]["reason"] == "boom"
    assert {"dead_id", "payload", "headers", "retry_count", "failed_at", "first_failed_at"} <= set(dead[0])
    assert len(js(dsn, "dlq", "inspect", "orders", "--type", "worse")) == 2
    assert js(dsn, "dlq", "inspect", "orders", "--consumer", "audit") == []
    assert js(dsn, "dlq", "inspect", "orders", "--older-than", "1h") == []
    assert len(js(dsn, "dlq", "inspect", "orders", "--limit", "1")) == 1
    fails(dsn, Exit.NOT_FOUND, "dlq", "inspect", "orders", "--consumer", "nobody")
    first = dead[0]
    shown = js(dsn, "dlq", "show", str(first["dead_id"]))
    assert shown == first
    assert "payload" in ok(dsn, "dlq", "show", str(first["dead_id"])).stdout
    # replay one: back to billing only
    assert js(dsn, "dlq", "replay", str(first["dead_id"])) == {
        "replayed": [{"dead_id": first["dead_id"], "msg_id": first["msg_id"]}]}
    fails(dsn, Exit.NOT_FOUND, "dlq", "replay", str(first["dead_id"]))
    client.tick("orders", force=True)
    assert [m.msg_id for m in client.receive("orders", "billing")] == [first["msg_id"]]
    assert len(client.receive("orders", "audit")) == 0
    client.receive("orders", "billing").ack()
    # bulk replay asks first and refuses without a terminal
    fails(dsn, Exit.NOT_CONFIRMED, "dlq", "replay-all", "orders", "--type", "worse")
    assert len(js(dsn, "dlq", "inspect", "orders")) == 4
    out = js(dsn, "dlq", "replay-all", "orders", "--type", "worse", "--yes")
    assert out == {"queue": "orders", "matched": 2, "replayed": 2, "skipped": 0}
    client.tick("orders", force=True)
    assert sorted(m.msg_id for m in client.receive("orders", "billing")) == sorted(other)
    assert js(dsn, "dlq", "replay-all", "orders", "--type", "worse", "--yes")["matched"] == 0
    # purge
    fails(dsn, Exit.NOT_CONFIRMED, "dlq", "purge", "orders")
    assert js(dsn, "dlq", "purge", "orders", "--older-than", "1h", "--yes") == {"queue": "orders", "purged": 0}
    assert js(dsn, "dlq", "purge", "orders", "--yes") == {"queue": "orders", "purged": 2}
    assert js(dsn, "dlq", "inspect", "orders") == []
    assert "no dead letters" in ok(dsn, "dlq", "inspect", "orders").stdout
    client.close()


def test_dlq_purge_refuses_a_typo_with_no_dead_letter_stored(dsn: str) -> None:
    """``pglogq dlq purge`` (and replay-all, which counts the same way) refuses an unknown queue or
    consumer and a negative age on a database with no dead letter at all, as with some stored."""
    ok(dsn, "queue", "create", "orders")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    for command in ("purge", "replay-all"):
        r = fails(dsn, Exit.NOT_FOUND, "dlq", command, "nosuchq", "--yes")
        assert 'unknown queue "nosuchq"' in r.stderr
        r = fails(dsn, Exit.NOT_FOUND, "dlq", command, "orders", "--consumer", "ghost", "--yes")
        assert "ghost" in r.stderr
        r = run(dsn, "dlq", command, "orders", "--older-than", "-1d", "--yes")
        assert r.exit_code == Exit.USAGE and "--older-than" in r.stderr, (r.exit_code, r.stderr)
    assert js(dsn, "dlq", "purge", "orders", "--consumer", "billing", "--older-than", "1d", "--yes") == {
        "queue": "orders", "purged": 0}


def test_dlq_replay_all_max(dsn: str) -> None:
    """--max N replays at most N, oldest first; --max 0 is a usage error that changes nothing."""
    ok(dsn, "queue", "create", "orders", "--set", "max_retries=1")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    ids = make_dead_letters(dsn, 3)
    r = CliRunner().invoke(cli_main, ["dlq", "replay-all", "orders", "--max", "0", "--yes", "--dsn", dsn])
    assert r.exit_code == 2, r.output
    out = js(dsn, "dlq", "replay-all", "orders", "--max", "2", "--yes")
    assert out == {"queue": "orders", "matched": 3, "replayed": 2, "skipped": 0}
    assert [d["msg_id"] for d in js(dsn, "dlq", "inspect", "orders")] == sorted(ids)[2:]
    out = js(dsn, "dlq", "replay-all", "orders", "--max", "1", "--yes")
    assert out == {"queue": "orders", "matched": 1, "replayed": 1, "skipped": 0}
    assert js(dsn, "dlq", "inspect", "orders") == []


def test_dlq_replay_all_in_chunks_with_progress(dsn: str) -> None:
    ok(dsn, "queue", "create", "orders", "--set", "max_retries=1")
    ok(dsn, "consumer", "subscribe", "orders", "billing")
    ids = make_dead_letters(dsn, 1200)
    out = js(dsn, "dlq", "replay-all", "orders", "--consumer", "billing", "--yes")
    assert out == {"queue": "orders", "matched": 1200, "replayed": 1200, "skipped": 0}
    client = pglogq.Client(dsn)
    client.tick("orders", force=True)
    got: list[int] = []
    while batch := client.receive("orders", "billing", max_messages=1000):
        got += [m.msg_id for m in batch]
        batch.ack()
    assert sorted(got) == sorted(ids)
    client.close()


# -- hosted commands, help, console script --------------------------------------------------


def test_hosted_commands_are_listed_and_missing_ones_explain_themselves() -> None:
    r = CliRunner().invoke(cli_main, ["--help"])
    assert r.exit_code == 0
    for name in ("worker", "ticker", "demo", "status", "dlq"):
        assert f"  {name} " in r.stdout
    assert "run" in CliRunner().invoke(cli_main, ["ticker", "--help"]).stdout

    @click.group(cls=LazyGroup, lazy={"nope": ("pglogq.no_such_module:command", "Does things.")})
    def grp() -> None:
        pass

    PglogqGroup = importlib.import_module("pglogq.cli.main").PglogqGroup

    root = PglogqGroup("root", lazy={})
    root.add_command(grp, "grp")
    r = CliRunner().invoke(root, ["grp", "nope", "--whatever"])
    assert r.exit_code == Exit.NOT_AVAILABLE
    assert "not available" in r.stderr and "pglogq.no_such_module" in r.stderr
    assert "not available" in CliRunner().invoke(root, ["grp", "nope", "--help"]).stdout.lower()


def test_every_command_takes_dsn_and_help() -> None:
    def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        yield path, cmd
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(click.Context(cmd)):
                if name in getattr(cmd, "lazy", {}):
                    continue
                sub = cmd.get_command(click.Context(cmd), name)
                assert sub is not None
                yield from walk(sub, [*path, name])

    seen = 0
    for path, cmd in walk(cli_main, []):
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert "--dsn" in opts and "--debug" in opts, path
        r = CliRunner().invoke(cli_main, [*path, "--help"])
        assert r.exit_code == 0 and "--dsn" in r.stdout, path
        seen += 1
    assert seen >= 30


def test_duration_parsing() -> None:
    assert parse_duration("1.5") == timedelta(seconds=1.5)
    assert parse_duration("250ms") == timedelta(milliseconds=250)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("2d") == timedelta(days=2)
    for bad in ("", "soon", "10 parsecs", "5m later"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def console_script() -> str:
    exe = Path(sys.executable).parent / "pglogq"
    assert exe.exists(), f"console script not installed next to {sys.executable}"
    return str(exe)


def test_console_script_end_to_end(dsn: str) -> None:
    exe = console_script()

    def sh(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([exe, *args, "--dsn", dsn], input=stdin, capture_output=True, text=True,
                              timeout=120, check=False)

    assert sh("queue", "create", "orders").returncode == 0
    assert sh("consumer", "subscribe", "orders", "billing").returncode == 0
    r = sh("send", "orders", '{"id": 42}', "--type", "order.created", "--json")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)["ids"][0]
    r = sh("send", "orders", "--json", stdin='{"id": 43}\n{"id": 44}\n')
    assert json.loads(r.stdout)["count"] == 2
    pglogq.Client(dsn).tick("orders", force=True)
    r = sh("receive", "orders", "billing", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert [m["payload"]["id"] for m in got] == [42, 43, 44] and got[0]["msg_id"] == first
    r = sh("send", "ordrs", "{}")
    assert r.returncode == Exit.NOT_FOUND
    assert r.stderr.strip().splitlines() == ['pglogq: error: unknown queue "ordrs"; did you mean "orders"?']
    r = sh("queue", "drop", "orders", stdin="")
    assert r.returncode == Exit.NOT_CONFIRMED


# -- demo -----------------------------------------------------------------------------------


def test_demo_on_a_fresh_database_twice(raw_db: str) -> None:
    for _ in range(2):
        out = js(raw_db, "demo")
        assert out["sent"] == 10 and out["stored_rows"] == 10
        assert out["consumers"] == {
            "billing": {"received": 10, "acked_batches": 1, "all_events_once": True},
            "audit": {"received": 10, "acked_batches": 1, "all_events_once": True},
        }
    r = ok(raw_db, "demo", "--events", "50")
    assert "stored rows: 50" in r.stdout and "billing" in r.stdout and "audit" in r.stdout
    assert "demo on" in r.stderr
    assert [q["queue_name"] for q in js(raw_db, "queue", "list")] == []  # the demo drops its queue


def test_hosted_dsn_is_passed_on(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, str | None] = {}

    @click.command()
    @click.option("--dsn")
    def fake(dsn: str | None) -> None:
        seen["dsn"] = dsn

    import types

    mod = types.ModuleType("pglogq_fake_hosted")
    mod.command = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pglogq_fake_hosted", mod)
    m = importlib.import_module("pglogq.cli.main")

    monkeypatch.setitem(m.HOSTED, "fakehosted", ("pglogq_fake_hosted:command", "A fake."))
    monkeypatch.setitem(m.main.lazy, "fakehosted", ("pglogq_fake_hosted:command", "A fake."))
    r = CliRunner().invoke(m.main, ["--dsn", dsn, "fakehosted"])
    assert r.exit_code == 0, r.output
    assert seen["dsn"] == dsn



def test_partitions_and_event_keys(dsn: str) -> None:
    client = pglogq.Client(dsn)
    assert "with 4 partitions" in ok(dsn, "queue", "create", "orders", "--partitions", "4").stdout
    assert [(q["queue_name"], q["partitions"]) for q in js(dsn, "queue", "list")] == [("orders", 4)]
    r = run(dsn, "queue", "create", "other", "--partitions", "1025")
    assert r.exit_code == Exit.USAGE and "--partitions" in r.stderr
    one = js(dsn, "send", "orders", '{"id": 1}', "--event-key", "customer-7")["ids"]
    many = js(dsn, "send", "orders", "--event-key", "customer-8", input='{"id": 2}\n{"id": 3}\n')["ids"]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT ev_id, ev_key, ev_partition FROM pglogq.event ORDER BY ev_id").fetchall()
    assert rows == [(one[0], "customer-7", pglogq.key_partition("customer-7", 4)),
                    (many[0], "customer-8", pglogq.key_partition("customer-8", 4)),
                    (many[1], "customer-8", pglogq.key_partition("customer-8", 4))]
    r = fails(dsn, Exit.INVALID, "send", "orders", '{"id": 4}', "--event-key", "k" * 256)
    assert "256 bytes" in r.stderr
    assert stored(dsn, "orders") == 3
    client.close()
