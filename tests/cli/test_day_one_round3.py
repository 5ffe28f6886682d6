"""Day one, round three: the CLI tried as a new user would (a bad DSN, the embedded server under
workers, the demo's leftovers, the tutorial's ticker output, schedules in a pipe)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pglogq.cli.errors import Exit
from tests.cli.test_day_one import env_without_dsn, script

JOBS = '''
import pglogq

consumer = pglogq.Consumer(None, "jobs", "c")


@consumer.handler()
def handle(msg):
    print("handling", msg.msg_id, flush=True)
'''


@pytest.fixture
def refused_dsn() -> Iterator[str]:
    """A DSN whose port nothing listens on (bound and never listened: connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield f"postgresql://postgres@127.0.0.1:{s.getsockname()[1]}/postgres"
    finally:
        s.close()


def test_worker_against_an_unreachable_database_fails_at_once_with_the_reason(
    refused_dsn: str, tmp_path: Path
) -> None:
    """It retried forever (the consumer takes a connection error for a database that restarts).
    The bound only catches that hang; it measures nothing."""
    (tmp_path / "jobsmod.py").write_text(JOBS)
    proc = subprocess.run(
        [script(), "worker", "jobsmod:consumer", "--stop-when-idle"], cwd=tmp_path, capture_output=True,
        text=True, env={**env_without_dsn(), "PGLOGQ_DSN": refused_dsn}, timeout=90, check=False,
    )
    assert proc.returncode == Exit.CONNECTION, (proc.returncode, proc.stderr)
    assert "cannot connect to the database" in proc.stderr and "refused" in proc.stderr.lower(), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# -- the embedded server under connected sessions; embedded start -----------------------------------


def _sh(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # stdin is not a terminal: a confirmation is refused without --yes (exit 10)
    return subprocess.run([script(), *args], capture_output=True, text=True, env=env, timeout=180,
                          check=False, stdin=subprocess.DEVNULL)


@pytest.mark.embedded_only
def test_embedded_stop_asks_when_sessions_are_connected_and_start_starts_it(tmp_path: Path) -> None:
    """`embedded stop` stopped the server under connected workers and a ticker without a word
    (they then failed with a raw AdminShutdown), and there was no `embedded start`."""
    import json

    import psycopg

    env = env_without_dsn(PGLOGQ_HOME=str(tmp_path / "home"))
    try:
        r = _sh("embedded", "start", "--json", env=env)
        assert r.returncode == 0, r.stderr
        first = json.loads(r.stdout)
        assert first["started"] is True and str(tmp_path / "home") in first["data_dir"]
        again = json.loads(_sh("embedded", "start", "--json", env=env).stdout)
        assert again["started"] is False and again["dsn"] == first["dsn"]
        assert "already running" in _sh("embedded", "start", env=env).stdout

        # nobody connected: it stops without asking, and starts again
        r = _sh("embedded", "stop", "--json", env=env)
        assert r.returncode == 0 and json.loads(r.stdout)["stopped"] is True, r.stderr
        r = _sh("embedded", "start", env=env)
        assert r.returncode == 0 and "started" in r.stdout, r.stderr
        dsn = json.loads(_sh("embedded", "status", "--json", env=env).stdout)["dsn"]

        # a worker is connected: refused without --yes off a terminal, the server still runs
        with psycopg.connect(dsn, autocommit=True, application_name="billing-worker") as worker:
            r = _sh("embedded", "stop", env=env)
            assert r.returncode == Exit.NOT_CONFIRMED, (r.returncode, r.stdout, r.stderr)
            assert "1 session(s) are connected" in r.stderr and "billing-worker" in r.stderr, r.stderr
            assert "--yes" in r.stderr, r.stderr
            assert worker.execute("SELECT 1").fetchone() == (1,)
            r = _sh("embedded", "stop", "--yes", "--json", env=env)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout) == {"data_dir": first["data_dir"], "stopped": True, "sessions": 1}
            assert "billing-worker" in r.stderr  # said even when not asked
            with pytest.raises(psycopg.OperationalError):
                worker.execute("SELECT 1")
        assert json.loads(_sh("embedded", "status", "--json", env=env).stdout)["running"] is False
    finally:
        _sh("embedded", "stop", "--yes", env=env)


# -- the demo leaves no queue behind ---------------------------------------------------------------


def test_demo_drops_its_queue(dsn: str) -> None:
    """It said "nothing is left behind" and left the queue pglogq_demo (without consumers)."""
    import json

    from tests.cli.test_day_one import ok, sql

    before = sql(dsn, "SELECT queue_name FROM pglogq.queue_info() ORDER BY 1")
    r = ok("demo", dsn=dsn)
    assert "nothing is left behind" in r.stdout and "dropped" in r.stdout, r.stdout
    assert sql(dsn, "SELECT queue_name FROM pglogq.queue_info() ORDER BY 1") == before
    out = json.loads(ok("demo", "--json", dsn=dsn).stdout)
    assert out["dropped"] is True and out["consumers"]["audit"]["all_events_once"] is True
    assert sql(dsn, "SELECT count(*) FROM pglogq.queue_info() WHERE queue_name = 'pglogq_demo'") == [(0,)]
    # every command the demo suggests next runs, in order
    suggested = [line.strip() for line in r.stdout.splitlines() if line.startswith("  pglogq ")]
    assert suggested[1] == "pglogq queue create pglogq_demo", suggested


# -- ticker run --once is quiet -------------------------------------------------------------------


def test_ticker_once_does_not_print_its_configuration(dsn: str) -> None:
    """The tutorial runs `pglogq ticker run --once` three times: each printed a 600-character
    configuration line (the daemon's start-up record) in the middle of the reader's output."""
    env = {**env_without_dsn(), "PGLOGQ_DSN": dsn}
    r = subprocess.run([script(), "ticker", "run", "--once"], capture_output=True, text=True, env=env,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "effective configuration" not in r.stderr, r.stderr
    assert all(len(line) <= 200 for line in r.stderr.splitlines()), r.stderr
    # asked for: the same line at DEBUG
    r = subprocess.run([script(), "ticker", "run", "--once", "--log-level", "DEBUG"], capture_output=True,
                       text=True, env=env, timeout=120, check=False)
    assert r.returncode == 0 and "effective configuration" in r.stderr, r.stderr


# -- schedule list in a pipe -----------------------------------------------------------------------


def test_schedule_list_off_a_terminal_is_one_line_per_schedule(dsn: str) -> None:
    """Piped (`| grep`, a log), the table wrapped each row over several lines of cut cells."""
    from tests.cli.test_day_one import ok

    ok("queue", "create", "maintenance_jobs", dsn=dsn)
    ok("schedule", "add", "maintenance_jobs", "hourly-statistics-report", "--cron", "0 * * * *",
       "--payload", '{"report": "stats"}', "--type", "report.statistics", dsn=dsn)
    ok("schedule", "add", "maintenance_jobs", "nightly-cleanup", "--cron", "30 2 * * *", "--payload", "{}",
       "--missed", "catch_up", dsn=dsn)
    r = ok("schedule", "list", dsn=dsn)  # stdout is a pipe here
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout  # a header and one line per schedule
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]
    assert [(x["name"], x["cron"], x["type"], x["missed"]) for x in rows] == [
        ("hourly-statistics-report", "0 * * * *", "report.statistics", "skip"),
        ("nightly-cleanup", "30 2 * * *", "-", "catch_up"),
    ], r.stdout
    assert all(x["queue"] == "maintenance_jobs" and x["sent"] == "0" for x in rows), r.stdout
