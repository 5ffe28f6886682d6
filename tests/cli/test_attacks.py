"""The command line under attack: what it prints is what it consumed, every bad input gets its
exit code and one line, and changes nothing (docs/reliability/attacks-cli.md lists every attack)."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pglogq.cli.errors import Exit
from tests.support.cli import console_script, fails, js, measured_pipe, ok, run, sleeping, spawn, unread
from tests.support.waiting import wait_for

INT8_MAX = 2**63 - 1
DEEP = 1100  # deeper than Python's json (and orjson's 1024) can walk


def sql(dsn: str, query: str, params: Any = None) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def setup_queue(dsn: str, queue: str = "q", consumer: str | None = "c") -> None:
    sql(dsn, "SELECT pglogq.create_queue(%s)", (queue,))
    if consumer:
        sql(dsn, "SELECT pglogq.subscribe(%s, %s)", (queue, consumer))


def send_raw(dsn: str, queue: str, *payloads: str) -> None:
    """Send JSON texts from SQL (no Python decoding or encoding in between), then tick."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for p in payloads:
            conn.execute("SELECT pglogq.send(%s, %s::jsonb)", (queue, p))
        conn.execute("SELECT pglogq.force_tick(%s)", (queue,))


def unacked_ids(dsn: str, queue: str = "q", consumer: str = "c") -> list[int]:
    """What the consumer would receive now (looked at in a rolled-back transaction)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT msg_id FROM pglogq.receive(%s, %s, 100000)", (queue, consumer)).fetchall()
        conn.rollback()
    return [int(r[0]) for r in rows]


def events_stored(dsn: str, queue: str = "q") -> int:
    rows = sql(dsn, "SELECT count(*) FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
                    " WHERE q.queue_name = %s", (queue,))
    return int(rows[0][0])


def queues(dsn: str) -> list[str]:
    return [r[0] for r in sql(dsn, "SELECT queue_name FROM pglogq.queue ORDER BY 1")]


def sh(dsn: str, *args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    return spawn(dsn, *args, **kwargs)


def read_all(fd: int) -> bytes:
    """Everything written to the pipe whose read end is ``fd``, until its writer exits."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/task").is_dir(),
                                reason="sees where the command waits through Linux's /proc")


# -- receive: what is shown is consumed, and only that ------------------------


def test_receive_prints_a_deeply_nested_event_and_every_event_before_it(dsn: str) -> None:
    """Regression: 1,000 events then one nested deeper than 1024 levels: before, exit 1, nothing
    printed and the first 1,000 acknowledged.  Now every event is printed exactly, then acked."""
    setup_queue(dsn)
    nested = "[" * DEEP + "]" * DEEP
    sql(dsn, "SELECT pglogq.send_batch_json('q', (SELECT jsonb_agg(i) FROM generate_series(1, 1000) i))")
    send_raw(dsn, "q", nested)
    r = run(dsn, "receive", "q", "c", "--max", "1500", "--json")
    assert r.exit_code == 0, (r.exit_code, r.stderr)
    assert r.stdout.rstrip().endswith(nested + "\n  }\n]") or nested in r.stdout
    # the document is valid JSON; Python cannot decode the deep payload, so check it as text
    items = r.stdout.split('"msg_id"')
    assert len(items) == 1002
    assert unacked_ids(dsn) == []  # everything shown was acknowledged, nothing more


def test_receive_prints_payloads_exactly(dsn: str) -> None:
    """Exact payloads seen from the CLI: big integers, numbers beyond double range, trailing zeros."""
    setup_queue(dsn)
    texts = ['{"id": 1180591620717411303425}', "1e400", '{"price": 1.10}', '"caf\u00e9 \\u00e9"']
    send_raw(dsn, "q", *texts)
    out = run(dsn, "receive", "q", "c", "--json")
    assert out.exit_code == 0, out.stderr
    assert '"payload": {"id":1180591620717411303425}' in out.stdout
    assert '"payload": 1' + "0" * 400 + "," in out.stdout  # as PostgreSQL stores 1e400
    assert '"payload": {"price":1.10}' in out.stdout
    got = json.loads(out.stdout)
    assert got[0]["payload"] == {"id": 2**70 + 1} and got[3]["payload"] == "caf\u00e9 \u00e9"
    human = ok(dsn, "receive", "q", "c").stdout  # nothing left
    assert "no events" in human


def test_receive_to_a_full_disk_acknowledges_nothing(dsn: str) -> None:
    """Regression: stdout that cannot be written (here /dev/full): before, every page was
    acknowledged first and then lost; now the page that was not printed is not acknowledged."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    setup_queue(dsn)
    send_raw(dsn, "q", *[json.dumps({"n": i}) for i in range(50)])
    before = unacked_ids(dsn)
    with open("/dev/full", "wb") as full:
        p = sh(dsn, "receive", "q", "c", "--json", stdout=full, stderr=subprocess.PIPE)
        _, err = p.communicate(timeout=120)
    assert p.returncode not in (0, None)
    line = err.decode().strip().splitlines()[-1]
    assert line.startswith("pglogq: error: ") and "0 event(s) shown and acknowledged" in line, line
    assert unacked_ids(dsn) == before


def test_receive_acknowledges_nothing_after_an_output_error(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the pages printed before an error stay acknowledged, the failing one and
    every later one do not; the message says how many were shown and acknowledged."""
    import pglogq.cli.receive as rc

    setup_queue(dsn)
    send_raw(dsn, "q", *[json.dumps({"n": i}) for i in range(7)])
    ids = unacked_ids(dsn)
    monkeypatch.setattr(rc, "PAGE", 3)
    calls = {"n": 0}
    real = rc._show_page

    def failing(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(5, "Input/output error")
        real(*args, **kwargs)

    monkeypatch.setattr(rc, "_show_page", failing)
    r = run(dsn, "receive", "q", "c", "--json")
    assert r.exit_code == Exit.OTHER
    assert "3 event(s) shown and acknowledged" in r.stderr and "not acknowledged" in r.stderr
    assert r.stdout.count('"msg_id"') == 3  # the first page, then the output failed
    assert unacked_ids(dsn) == ids[3:]


def test_receive_into_a_closed_pipe_is_a_normal_end_and_acknowledges_nothing_unshown(dsn: str) -> None:
    """A closed pipe, for receive: a reader that went away (`| head`) ends the command quietly,
    and what was not written is not acknowledged."""
    setup_queue(dsn)
    send_raw(dsn, "q", *[json.dumps({"n": i}) for i in range(20)])
    before = unacked_ids(dsn)
    p = sh(dsn, "receive", "q", "c", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    p.stdout.close()  # the reader is gone before anything is written
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert b"error" not in err and b"Traceback" not in err
    assert unacked_ids(dsn) == before


# -- tail: counts what it printed, ends quietly on a closed pipe -------------


def wait_for_tail_consumer(dsn: str, queue: str = "q") -> None:
    wait_for(lambda: sql(dsn, "SELECT 1 FROM pglogq.subscription WHERE consumer_name LIKE 'tail-%%'"),
             "tail to subscribe")


def test_tail_into_head_ends_quietly_and_removes_its_consumer(dsn: str) -> None:
    """Regression: `pglogq tail q | head -2` ended with "pglogq: error: BrokenPipeError"."""
    setup_queue(dsn, consumer=None)
    p = sh(dsn, "tail", "q", "--json", "--for", "120s", "--poll", "100ms",
           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    try:
        wait_for_tail_consumer(dsn)
        send_raw(dsn, "q", *[json.dumps({"n": i}) for i in range(5)])
        lines = [p.stdout.readline() for _ in range(2)]
        assert all(b'"payload":{"n":' in line for line in lines), lines
        p.stdout.close()  # head -2 exits

        def exited() -> bool:  # more events: the next write finds the pipe closed
            if p.poll() is not None:
                return True
            send_raw(dsn, "q", json.dumps({"more": True}))
            return False

        wait_for(exited, "tail to exit on the closed pipe", interval=0.1)
        err = p.communicate(timeout=120)[1]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert b"error" not in err and b"Traceback" not in err and b"Exception" not in err, err
    assert sql(dsn, "SELECT consumer_name FROM pglogq.subscription") == []


@LINUX_PROC
@pytest.mark.parametrize(("sig", "lines_"), [(signal.SIGTERM, "short"), (signal.SIGINT, "long")],
                         ids=["SIGTERM-short-lines", "SIGINT-lines-longer-than-PIPE_BUF"])
def test_tail_interrupted_while_printing_counts_what_it_printed(dsn: str, tmp_path: Path, sig: int,
                                                                lines_: str) -> None:
    """Regression: interrupted in the middle of a page, tail said "0 event(s)" after 337.
    Then it said 336 after 337: the line whose write was blocked when the signal came was left
    in Python's buffer, not counted, and flushed at exit (a line longer than the buffer was cut).
    Here the write blocks because the test stops reading a pipe the page cannot fit in (its
    capacity is measured, the page sized from it); the signal comes once tail waits on it."""
    setup_queue(dsn, consumer=None)
    r, w, capacity = measured_pipe()
    errfile = tmp_path / "stderr"
    with errfile.open("wb") as err_w:
        p = sh(dsn, "tail", "q", "--json", "--for", "300s", "--poll", "100ms", stdout=w, stderr=err_w)
    os.close(w)
    try:
        wait_for_tail_consumer(dsn)
        # one page (1,000 events at most) of three pipes' worth
        if lines_ == "short":
            events, pad = 900, max(200, 3 * capacity // 900)
        else:
            pad = 2 * select.PIPE_BUF + 1000
            events = 3 * capacity // pad + 3
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pglogq.send_batch_json('q', %s::jsonb)",
                         (json.dumps([{"pad": "x" * pad}] * events),))
            conn.execute("SELECT pglogq.force_tick('q')")
        # it has printed, and its main thread waits: on stdout, since the page cannot all fit
        wait_for(lambda: unread(r) > 0 and sleeping(p.pid), "tail to wait on the full pipe")
        p.send_signal(sig)
        out = read_all(r)  # it may finish the line it had started once the pipe has room
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    err = errfile.read_bytes()
    assert p.returncode == 0, err
    report = [line for line in err.decode().splitlines() if "event(s) printed" in line]
    assert len(report) == 1, err
    said = int(report[0].split()[0])
    lines = out.split(b"\n")
    assert lines[-1] == b"", ("stdout ends in the middle of a line", lines[-1][-80:], said)
    printed = lines[:-1]
    assert all(json.loads(line)["payload"] == {"pad": "x" * pad} for line in printed)
    assert said == len(printed), (said, len(printed), err)
    assert 0 < said < events, (said, events)
    assert sql(dsn, "SELECT consumer_name FROM pglogq.subscription") == []


# -- exit codes of bad input ---------------------------------------


def test_send_refuses_nan_and_infinity_with_the_invalid_input_code(dsn: str) -> None:
    """Regression: `send q NaN` and `send q Infinity` exited 1 (a server syntax error)."""
    setup_queue(dsn)
    for bad in ("NaN", "Infinity", "-Infinity", '{"a": NaN}', "[1, Infinity]", "{} {}", ""):
        r = run(None, "--dsn", dsn, "send", "q", "--", bad)
        assert r.exit_code == Exit.INVALID and r.stderr.startswith("pglogq: error: "), (bad, r.stderr)
        assert "not valid JSON" in r.stderr, (bad, r.stderr)
    assert events_stored(dsn) == 0


def test_send_keeps_numbers_exactly(dsn: str) -> None:
    """A big integer, a number beyond double range and trailing zeros reach the server as typed."""
    setup_queue(dsn)
    ok(dsn, "send", "q", '{"id": 1180591620717411303425, "x": 1e400, "p": 1.10}')
    rows = sql(dsn, "SELECT ev_payload::text FROM pglogq.event")
    assert rows[0][0] == '{"p": 1.10, "x": 1' + "0" * 400 + ', "id": 1180591620717411303425}'


def test_durations_too_large_are_usage_errors(dsn: str) -> None:
    """Regression: `--delay 99999999999d` exited 1 with an OverflowError."""
    setup_queue(dsn)
    for opt in (["send", "q", "{}", "--delay", "99999999999d"], ["send", "q", "{}", "--delay", "1e9w"],
                ["tail", "q", "--for", "99999999999999999999s"],
                ["dlq", "inspect", "q", "--older-than", "99999999999d"],
                ["status", "--stall-after", "99999999999d"]):
        r = run(dsn, *opt)
        assert r.exit_code == Exit.USAGE and "Traceback" not in r.stderr, (opt, r.exit_code, r.stderr)
    assert events_stored(dsn) == 0


@pytest.mark.parametrize("dsn_text", ["nonsense", "host=x =bad", "postgresql://[bad", "host='unterminated"])
def test_a_malformed_dsn_is_a_usage_error(dsn_text: str) -> None:
    """Regression: a malformed --dsn exited 1.  It is a usage error (2): it can never connect."""
    r = fails(dsn_text, Exit.USAGE, "queue", "list")
    assert "invalid DSN" in r.stderr
    r = run(None, "queue", "list", env={"PGLOGQ_DSN": dsn_text})
    assert r.exit_code == Exit.USAGE and "PGLOGQ_DSN" in r.stderr, r.stderr


def test_a_dsn_pointing_nowhere_is_a_connection_error(tmp_path: Path) -> None:
    r = run(None, "queue", "list", env={"PGLOGQ_DSN": f"host={tmp_path} port=1 dbname=x connect_timeout=2"})
    assert r.exit_code == Exit.CONNECTION and "cannot connect" in r.stderr
    r = fails("port=abc host=127.0.0.1", Exit.CONNECTION, "queue", "list")


@pytest.mark.parametrize("by", [str(INT8_MAX), str(-INT8_MAX - 1), str(2**63), str(-(2**63) - 1), str(2**64)])
def test_seek_by_a_huge_count_is_invalid_input(dsn: str, by: str) -> None:
    """Regression: `seek --by 9223372036854775807` exited 1 (numeric out of range)."""
    setup_queue(dsn)
    send_raw(dsn, "q", "{}")
    before = unacked_ids(dsn)
    for execute in ([], ["--execute"]):
        r = fails(dsn, Exit.INVALID, "consumer", "seek", "q", "c", f"--by={by}", *execute)
        assert "Traceback" not in r.stderr
    assert unacked_ids(dsn) == before


@pytest.mark.parametrize("cmd", [["dlq", "replay"], ["dlq", "show"]])
@pytest.mark.parametrize("value", [str(2**63), "99999999999999999999", str(-(2**63) - 1)])
def test_ids_beyond_64_bits_are_invalid_input(dsn: str, cmd: list[str], value: str) -> None:
    """Regression: `dlq replay 99999999999999999999` exited 7 ("pglogq is not installed")."""
    r = run(None, "--dsn", dsn, *cmd, "--", value)  # "--": a negative number is not an option
    assert r.exit_code == Exit.INVALID, r.stderr
    assert r.stderr.startswith("pglogq: error: ") and "not installed" not in r.stderr and "64-bit" in r.stderr


def test_ids_at_the_int8_boundaries_are_simply_unknown(dsn: str) -> None:
    for value in (str(INT8_MAX), str(-INT8_MAX - 1), "0", "-1"):
        for cmd in ("replay", "show"):
            r = run(None, "--dsn", dsn, "dlq", cmd, "--", value)
            assert r.exit_code == Exit.NOT_FOUND, (cmd, value, r.stderr)
    assert run(dsn, "dlq", "show", "abc").exit_code == Exit.USAGE
    assert run(dsn, "dlq", "show", "").exit_code == Exit.USAGE


# -- queue create --set: all or nothing --------------------------------------


def test_queue_create_with_a_refused_setting_creates_nothing(dsn: str) -> None:
    """Regression: a refused --set exited 4 but left the queue created."""
    for bad in (["--set", "ticker_max_lag=soon"], ["--set", "max_retries=3", "--set", "bogus=1"],
                ["--set", "max_retries=-1"], ["--set", f"batch_max_events={2**31}"]):
        fails(dsn, Exit.INVALID, "queue", "create", "q", *bad)
        assert queues(dsn) == []
    # an existing queue keeps its settings when one of several is refused
    ok(dsn, "queue", "create", "q", "--set", "max_retries=7")
    fails(dsn, Exit.INVALID, "queue", "create", "q", "--set", "max_retries=2", "--set", "retry_delay=never")
    assert js(dsn, "queue", "config", "q", "max_retries")["config"] == {"max_retries": 7}


# -- send from stdin: all or nothing, the failing line named -----------------


def test_send_stdin_names_the_refused_line_and_sends_nothing(dsn: str) -> None:
    """Regression: a NaN line exited 1 ("invalid input syntax for type json"); a line the
    server refused did not say which, nor how many had been sent.  Now: line number, exit 4,
    and nothing is sent (all lines go in one transaction)."""
    setup_queue(dsn)
    lines = "".join(json.dumps({"n": i}) + "\n" for i in range(5))
    r = fails(dsn, Exit.INVALID, "send", "q", "--batch-size", "2", input=lines + "NaN\n" + '{"n": 9}\n')
    assert "stdin line 6" in r.stderr and "nothing was sent" in r.stderr
    assert events_stored(dsn) == 0
    ok(dsn, "queue", "config", "q", "max_payload_bytes", "100")
    big = json.dumps({"pad": "x" * 500})
    r = fails(dsn, Exit.INVALID, "send", "q", "--batch-size", "2", input=lines + '{"n": 6}\n' + big + "\n{}\n")
    assert "stdin line 7" in r.stderr and "too large" in r.stderr and "nothing was sent" in r.stderr
    assert events_stored(dsn) == 0
    many = js(dsn, "send", "q", "--batch-size", "2", input=lines)
    assert many["count"] == 5 and events_stored(dsn) == 5


@LINUX_PROC
@pytest.mark.parametrize("runner_sigint", ["default", "ignored"])
def test_send_stdin_interrupted_sends_nothing(dsn: str, runner_sigint: str) -> None:
    """Ctrl-C while lines are still coming: nothing is committed (one transaction).  The command
    waits in a read of stdin (open, nothing more on it) when SIGINT comes.  "ignored": the test
    runner itself ignores SIGINT (a background job of a non-interactive shell), which the child
    would inherit: the test failed there, the command never having received the Ctrl-C."""
    setup_queue(dsn)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if runner_sigint == "ignored" else None
    try:
        p = sh(dsn, "send", "q", "--batch-size", "1", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
               stderr=subprocess.PIPE)
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
    assert p.stdin is not None and p.stderr is not None and p.stdout is not None
    try:
        for i in range(5):
            p.stdin.write(json.dumps({"n": i}).encode() + b"\n")
        p.stdin.flush()

        def sent_and_reading() -> bool:
            # its transaction is open and nothing runs in it: the main thread waits in the read
            # of stdin (or on the server, between two sends: the outcome is the same)
            rows = sql(dsn, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'pglogq-cli'"
                            " AND datname = current_database() AND state = 'idle in transaction'")
            return bool(rows) and sleeping(p.pid)

        wait_for(sent_and_reading, "the sends to reach the server and send to wait on stdin")
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)  # stdin stays open: the command is still reading lines
    finally:
        if p.poll() is None:
            p.kill()
        p.stdin.close()
    err = p.stderr.read()
    p.stdout.close()
    p.stderr.close()
    assert p.returncode == Exit.INTERRUPTED, err
    assert b"nothing was sent" in err
    assert events_stored(dsn) == 0


# -- the rest of the hostile review ---------------------------------------------------------


def test_int_options_at_their_edges(dsn: str) -> None:
    setup_queue(dsn)
    for args in (["receive", "q", "c", "--max", "0"], ["receive", "q", "c", "--max", "-1"],
                 ["receive", "q", "c", "--max", str(2**63)], ["receive", "q", "c", "--max", "x"],
                 ["send", "q", "{}", "--priority", "-1"], ["send", "q", "{}", "--priority", str(2**31)],
                 ["send", "q", "--batch-size", "0"], ["tail", "q", "--max", "0"],
                 ["dlq", "inspect", "q", "--limit", "0"], ["status", "--count", "0"],
                 ["status", "--watch", "nan"], ["status", "--watch", "-1"], ["status", "--watch", "inf"],
                 ["demo", "--events", "1"], ["receive", "q", "c", "--max", ""]):
        r = run(dsn, *args, input="")
        assert r.exit_code == Exit.USAGE and "Traceback" not in r.stderr, (args, r.exit_code, r.stderr)
    assert events_stored(dsn) == 0
    assert sql(dsn, "SELECT count(*) FROM pglogq.subscription")[0][0] == 1


def test_unknown_queue_and_consumer_everywhere(dsn: str) -> None:
    setup_queue(dsn)
    for args in (["receive", "nope", "c"], ["receive", "q", "nope"], ["receive", "q", "c", "--peek", "--worker", ""],
                 ["consumer", "seek", "q", "nope", "--to", "latest"], ["consumer", "seek", "nope", "c", "--by", "1"],
                 ["consumer", "list", "nope"], ["queue", "config", "nope"], ["queue", "pause", "nope"],
                 ["dlq", "inspect", "nope"], ["dlq", "purge", "nope", "--yes"], ["status", "nope"],
                 ["tail", "nope", "--for", "1s"], ["send", "nope", "{}"]):
        r = run(dsn, *args)
        assert r.exit_code in (Exit.NOT_FOUND, Exit.INVALID), (args, r.exit_code, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pglogq: error: "), (args, r.stderr)


def test_seek_to_garbage_is_invalid_input_and_changes_nothing(dsn: str) -> None:
    setup_queue(dsn)
    send_raw(dsn, "q", "{}")
    before = unacked_ids(dsn)
    for to in ("yesterday-ish", "", "99999999999999999999", "-1", "9999-99-99"):
        r = run(dsn, "consumer", "seek", "q", "c", "--to", to, "--execute")
        assert r.exit_code in (Exit.INVALID, Exit.USAGE), (to, r.exit_code, r.stderr)
        assert "Traceback" not in r.stderr
    assert unacked_ids(dsn) == before


def test_status_and_list_into_a_closed_pipe_end_quietly(dsn: str) -> None:
    """A closed pipe, every printing command: a closed stdout is a normal end."""
    setup_queue(dsn)
    for args in (["status"], ["queue", "list"], ["consumer", "list", "--json"], ["dlq", "inspect", "q"],
                 ["schema", "sql"]):
        p = sh(dsn, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.close()
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0 and b"rror" not in err, (args, p.returncode, err)


@LINUX_PROC
def test_receive_interrupted_reports_what_was_acknowledged(dsn: str) -> None:
    """SIGINT while receive prints into a full pipe: exit 130, one line, that page not acked.
    The page is sized from the pipe's measured capacity, so it cannot all fit; the signal comes
    once receive has printed and waits on the pipe (before, a sleep of 1 s stood for that)."""
    setup_queue(dsn)
    r, w, capacity = measured_pipe()
    events, pad = 300, max(500, 3 * capacity // 300)  # one page of three pipes' worth
    sql(dsn, "SELECT pglogq.send_batch_json('q', %s::jsonb)", (json.dumps([{"pad": "x" * pad}] * events),))
    sql(dsn, "SELECT pglogq.force_tick('q')")
    before = unacked_ids(dsn)
    p = sh(dsn, "receive", "q", "c", "--max", str(events), "--json", stdout=w, stderr=subprocess.PIPE)
    os.close(w)
    try:
        wait_for(lambda: unread(r) > 0 and sleeping(p.pid), "receive to wait on the full pipe")
        p.send_signal(signal.SIGINT)
        out = read_all(r)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == Exit.INTERRUPTED, err
    assert out.startswith(b"[\n"), out[:80]
    lines = err.decode().strip().splitlines()
    assert lines[-1].startswith("pglogq: error: interrupted") and "0 event(s) shown and acknowledged" in lines[-1]
    assert f"the page being printed ({events} event(s)) was not acknowledged" in lines[-1], lines[-1]
    assert unacked_ids(dsn) == before


def test_receive_human_output_prints_each_page(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import pglogq.cli.receive as rc

    monkeypatch.setattr(rc, "PAGE", 2)
    setup_queue(dsn)
    send_raw(dsn, "q", *[json.dumps({"n": i}) for i in range(5)])
    out = ok(dsn, "receive", "q", "c").stdout
    assert all(f'{{"n":{i}}}' in out for i in range(5))
    assert "5 event(s) received and acknowledged" in out
    assert unacked_ids(dsn) == []


def test_an_empty_dsn_is_refused_not_replaced(dsn: str) -> None:
    """`--dsn "$DATABASE_URL"` with the variable unset must not talk to another database."""
    r = run(None, "--dsn", "", "queue", "list", env={"PGLOGQ_DSN": dsn})
    assert r.exit_code == Exit.USAGE and "empty DSN" in r.stderr


def test_dlq_replay_of_several_ids_is_all_or_nothing(dsn: str) -> None:
    """`dlq replay 1 2 999`: one unknown id, none replayed (before: the first ones were)."""
    setup_queue(dsn)
    sql(dsn, "SELECT pglogq.set_queue_config('q', 'max_retries', '1')")
    send_raw(dsn, "q", '{"n": 1}')
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(2):
            rows = conn.execute("SELECT batch_id, msg_id, txid::text FROM pglogq.receive('q', 'c', 10)").fetchall()
            for b, m, t in rows:
                conn.execute("SELECT pglogq.nack(%s, %s, '0 s'::interval, 'boom', %s::xid8)", (b, m, t))
            if rows:
                conn.execute("SELECT pglogq.ack(%s, %s, %s::xid8)", (rows[-1][0], rows[-1][1], rows[-1][2]))
            conn.execute("SELECT pglogq.maint_pump()")
            conn.execute("SELECT pglogq.force_tick('q')")
    dead = [r[0] for r in sql(dsn, "SELECT dead_id FROM pglogq.dead_letter")]
    assert len(dead) == 1
    fails(dsn, Exit.NOT_FOUND, "dlq", "replay", str(dead[0]), "999999")
    assert [r[0] for r in sql(dsn, "SELECT dead_id FROM pglogq.dead_letter")] == dead


def capture_triggers(dsn: str) -> list[str]:
    return [r[0] for r in sql(dsn, "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY tgname")]


def test_a_bad_table_name_is_invalid_input_and_changes_nothing(dsn: str) -> None:
    """`capture add 't1; drop table t1' q` and other names PostgreSQL cannot parse: exit 4 (a bad
    name), one line, nothing captured; a well-formed name of no table stays "not found" (3)."""
    setup_queue(dsn)
    sql(dsn, "CREATE TABLE t1 (id int PRIMARY KEY)")
    ok(dsn, "capture", "add", "t1", "q")
    before = capture_triggers(dsn)
    assert before
    for name in ("t1; drop table t1", '"unterminated', "a.b.c.d", "other_db.public.t1", "", " ", "t1.",
                 '"t1"x'):
        for args in (["capture", "add", name, "q"], ["capture", "remove", name]):
            r = fails(dsn, Exit.INVALID, *args)
            assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
            assert "invalid table name" in r.stderr, (args, r.stderr)
    for name in ("nosuch", "nosuch_schema.t1"):
        for args in (["capture", "add", name, "q"], ["capture", "remove", name]):
            r = fails(dsn, Exit.NOT_FOUND, *args)
            assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert capture_triggers(dsn) == before
    assert sql(dsn, "SELECT count(*) FROM t1") == [(0,)]
    assert [r["table_name"] for r in js(dsn, "capture", "list")] == ["t1"]


def test_dashboard_on_a_port_in_use_is_one_error_line(dsn: str) -> None:
    """Another process listens on the port: one `pglogq: error:` line, exit 5 (conflict: the
    address is in use), not uvicorn's own log line and its exit 3 ("not found")."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = subprocess.run([console_script(), "--dsn", dsn, "dashboard", "--port", str(port)],
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == Exit.CONFLICT, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pglogq: error: "), p.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0], p.stderr
