"""Issue 16 #1, #2 and issue 19 #10: cancel until a handler starts, crashes as failed attempts,
poison messages that end dead, stop requests for running jobs, maintenance releasing a dead
worker's batch.  Real server, real worker processes (docs/reliability/attacks-jobs-cancel.md)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from consumer_support import MODES, Spec, running

import pglogq


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def rows(dsn: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, args)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def setup(client: pglogq.Client, n: int, **config: Any) -> list[int]:
    client.create_queue("q")
    client.subscribe("q", "c")
    for key, value in config.items():
        client.set_queue_config("q", key, value)
    ids = client.send_batch("q", [{"n": i} for i in range(n)], type="t")
    client.tick("q", force=True)
    return ids


def wait_until(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# -- cancel: SQL contract ------------------------------------------------------------------------


def test_cancel_after_receive_when_the_receiver_marks_starts(client: pglogq.Client) -> None:
    ids = setup(client, 3)
    page = client.receive("q", "c", start_first=1)
    assert [m.msg_id for m in page] == ids
    assert client.cancel("q", ids[0]) is False  # marked started by receive
    assert client.cancel("q", ids[2]) is True  # received, not started
    assert client.cancel("q", ids[2]) is False  # cancelled twice: false, nothing changes
    # the runtime marks the next starts: the cancelled one is reported, never to be started
    assert client.mark_started(page.messages[1]) == []
    assert client.cancel("q", ids[1]) is False
    assert client.mark_started(page.messages[2]) == [ids[2]]
    assert page.ack()
    assert len(client.receive("q", "c")) == 0


def test_a_receiver_that_does_not_mark_starts_keeps_the_old_contract(client: pglogq.Client) -> None:
    """SQL-only consumers (receive without start_first): the whole page counts as started."""
    ids = setup(client, 3)
    page = client.receive("q", "c")
    assert all(client.cancel("q", i) is False for i in ids)
    assert client.mark_started(page.messages[2]) == []  # nothing to mark
    # a second receive returns the same page, no attempt counted
    again = client.receive("q", "c")
    assert [(m.msg_id, m.retry_count) for m in again] == [(i, 0) for i in ids]


def test_cancel_counts_every_consumer(client: pglogq.Client) -> None:
    ids = setup(client, 2)
    client.subscribe("q", "d")  # subscribed after the tick: never handed these events
    client.receive("q", "c", start_first=0)
    assert client.cancel("q", ids[1]) is True
    assert client.cancel("q", ids[0]) is True


def test_cancel_and_start_race_has_exactly_one_winner(client: pglogq.Client, dsn: str) -> None:
    """A cancel and a start racing for each of 200 events: cancel true <=> never started."""
    ids = setup(client, 200)
    page = client.receive("q", "c", max_messages=200, start_first=0)
    outcome_cancel: dict[int, bool] = {}
    started: set[int] = set()
    barrier = threading.Barrier(2)

    def canceller() -> None:
        with pglogq.Client(dsn) as other:
            barrier.wait()
            for i in reversed(ids):
                try:
                    outcome_cancel[i] = other.cancel("q", i)
                except pglogq.CancelConflict:
                    outcome_cancel[i] = False  # refused at COMMIT: the start won

    t = threading.Thread(target=canceller)
    t.start()
    barrier.wait()
    for m in page:
        gone = client.mark_started(m)
        assert gone is not None
        if m.msg_id not in gone:
            started.add(m.msg_id)
    t.join()
    assert page.ack()
    for i in ids:
        assert outcome_cancel[i] is (i not in started), i
    assert 0 < len(started) < len(ids) or len(started) in (0, len(ids))


def test_start_frontier_can_move_back(client: pglogq.Client) -> None:
    ids = setup(client, 3)
    page = client.receive("q", "c", start_first=3)
    assert client.cancel("q", ids[2]) is False
    assert client.mark_started(page.messages[0], back=True) == []
    assert client.cancel("q", ids[2]) is True
    assert client.cancel("q", ids[0]) is False
    with pytest.raises(pglogq.NotStartedThatFar):
        client.mark_started(page.messages[1], back=True)
    assert client.mark_started(None, back=True, batch_id=page.id) == []
    assert client.cancel("q", ids[0]) is True


@pytest.mark.parametrize("bad", [-1, 100001, 2**31, True, "1"])
def test_start_first_out_of_range(client: pglogq.Client, bad: Any) -> None:
    setup(client, 1)
    with pytest.raises((pglogq.InvalidStartCount, pglogq.InvalidArgument)):
        client.receive("q", "c", start_first=bad)
    with psycopg.connect(client.dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT * FROM pglogq.receive('q', 'c', 10, NULL, -1)")
    assert info.value.sqlstate == "PQ060"
    assert client.cancel("q", 1) is True  # nothing was received


def test_mark_started_refuses_what_is_not_in_the_page(client: pglogq.Client) -> None:
    setup(client, 3)
    page = client.receive("q", "c", max_messages=1, start_first=0)
    with psycopg.connect(client.dsn, autocommit=True) as conn:
        for args, code in [((page.id, 2), "PQ010"), ((page.id, None), "PQ010"), ((0, 1), "PQ008"),
                           ((2**62, 1), "PQ008")]:
            with pytest.raises(psycopg.Error) as info:
                conn.execute("SELECT pglogq.mark_started(%s, %s)", args)
            assert info.value.sqlstate == code, args
    assert page.ack()
    with pytest.raises(pglogq.MessageNotInBatch):
        client.mark_started(page.messages[0])  # acknowledged, the batch goes on
    rest = client.receive("q", "c", max_messages=10, start_first=0)
    assert rest.ack()
    assert client.mark_started(page.messages[0]) is None  # the batch is closed: no longer ours


# -- cancel: the consumer runtime ---------------------------------------------------------------


def test_runtime_never_starts_an_event_cancelled_in_its_page(mode: str, client: pglogq.Client, dsn: str) -> None:
    """The issue's case: a worker busy on job 1, jobs 2 and 3 in the same page; cancel(3)."""
    ids = setup(client, 3)
    seen: list[int] = []
    release = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"start_ahead": 0.05})

    @spec.handler("t")
    def handle(msg: Any) -> None:
        seen.append(msg.msg_id)
        if msg.msg_id == ids[0]:
            release.wait(30)

    with running(mode, spec, stop_when_idle=True) as r:
        wait_until(lambda: seen == [ids[0]])
        time.sleep(0.2)  # longer than start_ahead: nothing after job 1 counts as started
        assert client.cancel("q", ids[2]) is True
        assert client.cancel("q", ids[0]) is False
        release.set()
        stats = r.join()
    assert seen == ids[:2]
    assert (stats.handled, stats.cancelled, stats.failed) == (2, 1, 0)
    assert len(client.receive("q", "c")) == 0


def test_running_job_sees_the_stop_request(mode: str, client: pglogq.Client, dsn: str) -> None:
    """A long report checks msg.progress(): False once cancel(..., running=True) asked it to stop."""
    ids = setup(client, 2)
    steps: list[int] = []
    spec = Spec(dsn, "q", "c", kwargs={"heartbeat_interval": 0.1, "progress_interval": 0.05})

    @spec.handler("t")
    def report(msg: Any) -> Any:
        if msg.msg_id != ids[0]:
            return None
        if "async" in type(msg).__name__.lower():

            async def long_report() -> None:
                for step in range(600):
                    steps.append(step)
                    if not await msg.progress(step / 6, stage="rendering"):
                        return  # stopped cleanly: acknowledged as handled
                    await __import__("asyncio").sleep(0.05)

            return long_report()
        for step in range(600):
            steps.append(step)
            if not msg.progress(step / 6, stage="rendering"):
                return None
            time.sleep(0.05)
        return None

    with running(mode, spec, stop_when_idle=True) as r:
        wait_until(lambda: len(steps) > 3)
        assert client.cancel("q", ids[0]) is False
        assert client.cancel("q", ids[0], running=True) is True
        stats = r.join()
    assert len(steps) < 600
    assert stats.handled == 2
    assert client.cancel("q", ids[0], running=True) is False  # done: nothing runs it
    with pytest.raises(pglogq.UnknownMessage):
        client.request_stop("q", 999)


# -- crashes are failed attempts ----------------------------------------------------------------


def test_a_crashed_page_counts_attempts_and_isolates_the_culprit(client: pglogq.Client) -> None:
    """SQL level: a page handed out again without ack, with handlers started, is a crash."""
    ids = setup(client, 4, max_retries=2)
    page = client.receive("q", "c", start_first=0)
    client.mark_started(page.messages[2])  # handlers ran 1, 2, started 3; 4 never started
    # the worker dies; the same worker name asks again
    again = client.receive("q", "c", start_first=0)
    assert [(m.msg_id, m.retry_count) for m in again] == [(ids[0], 1)]  # halved: 3 suspects -> 1
    assert client.cancel("q", ids[1]) is False  # started before the crash
    client.mark_started(again.messages[0])
    assert again.ack()
    page = client.receive("q", "c", start_first=0)
    assert [(m.msg_id, m.retry_count) for m in page] == [(ids[1], 1)]
    client.mark_started(page.messages[0])
    assert page.ack()
    deliveries = 1
    while True:
        page = client.receive("q", "c", start_first=0)
        if not page or page.messages[0].msg_id != ids[2]:
            break
        assert len(page) == 1  # the culprit stands alone
        deliveries += 1
        client.mark_started(page.messages[0])  # ... and kills its worker again
    assert deliveries == 3  # max_retries + 1
    assert [(m.msg_id, m.retry_count) for m in page] == [(ids[3], 0)]  # never started: no attempt
    [dead] = client.dlq_inspect("q", "c")
    assert dead.msg_id == ids[2] and dead.retry_count == 2
    assert "never finished" in (dead.reason or "") and "3 hand-out" in (dead.reason or "")
    assert page.ack()
    assert rows(client.dsn, "SELECT count(*) FROM pglogq.attempt") == [(0,)]


def test_nack_after_a_crash_counts_the_crash(client: pglogq.Client) -> None:
    ids = setup(client, 1, max_retries=1)
    page = client.receive("q", "c", start_first=1)
    page = client.receive("q", "c", start_first=1)  # crashed once
    assert page.messages[0].retry_count == 1
    assert client.nack(page.messages[0], reason="boom") == "dead"  # 2 failed attempts = max_retries + 1
    assert page.ack()
    [dead] = client.dlq_inspect("q", "c")
    assert (dead.msg_id, dead.retry_count) == (ids[0], 1)


WORKER = textwrap.dedent("""
    import os, sys, psycopg, pglogq
    dsn, name = sys.argv[1], sys.argv[2]
    consumer = pglogq.Consumer(dsn, "q", "c", worker=name, max_messages=10, poll_interval=0.2,
                               heartbeat_interval=0.2)

    @consumer.handler("t")
    def handle(msg):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO deliveries VALUES (%s, %s)", (msg.msg_id, msg.retry_count))
        if msg.payload.get("poison"):
            os._exit(1)  # a segfaulting native library, the OOM killer...

    stats = consumer.run(stop_when_idle=True)
    consumer.close()
    sys.exit(0)
""")


@pytest.mark.parametrize("names", ["same", "new"])
def test_poison_message_ends_dead_and_its_page_is_handled(
    client: pglogq.Client, dsn: str, tmp_path: Path, names: str
) -> None:
    """A real worker process whose handler calls os._exit(1) on one payload, restarted as a
    supervisor would: the poison event is delivered max_retries + 1 times then dead-lettered
    with a reason saying so; every other event of its page is handled."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "max_retries", 2)
    client.set_queue_config("q", "dead_interval", "1 second")
    rows(dsn, "CREATE TABLE deliveries (msg_id bigint, retry_count int)")
    payloads: list[dict[str, Any]] = [{"n": i} for i in range(10)]
    payloads[3]["poison"] = True
    ids = client.send_batch("q", payloads, type="t")
    client.tick("q", force=True)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    exits = []
    for run in range(15):  # the supervisor
        name = "w" if names == "same" else f"w{run}"
        proc = subprocess.run([sys.executable, str(script), dsn, name], capture_output=True, text=True, timeout=120)
        exits.append(proc.returncode)
        if proc.returncode == 0:
            break
        assert proc.returncode == 1, proc.stderr
        if names == "new":
            time.sleep(1.1)  # the next worker takes the silent one's batch over after dead_interval
            client.maintain()  # maintenance releases it (issue 19 #10)
    assert exits[-1] == 0 and exits.count(1) == 3, exits
    poison = ids[3]
    delivered = rows(dsn, "SELECT retry_count FROM deliveries WHERE msg_id = %s ORDER BY 1", poison)
    assert delivered == [(0,), (1,), (2,)]  # max_retries + 1 deliveries, each counted
    [dead] = client.dlq_inspect("q", "c")
    assert dead.msg_id == poison and "never finished: 3 hand-out(s)" in (dead.reason or "")
    others = rows(dsn, "SELECT DISTINCT msg_id FROM deliveries WHERE msg_id <> %s ORDER BY 1", poison)
    assert [r[0] for r in others] == [i for i in ids if i != poison]
    assert len(client.receive("q", "c", worker="w-check")) == 0  # all acknowledged, nothing dead but it
    assert len(client.dlq_inspect("q")) == 1


# -- maintenance releases a dead worker's batch (issue 19 #10) -----------------------------------


def test_maintenance_releases_a_silent_workers_batch(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "dead_interval", "1 second")
    ids = client.send_batch("q", [{"n": i} for i in range(3)], type="t")
    client.tick("q", force=True)
    a = client.receive("q", "c", worker="A", start_first=1)
    assert [m.msg_id for m in a] == ids
    assert ("release", "q") not in client_ops(client)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pglogq.q"')
        time.sleep(1.2)  # A falls silent
        assert ("release", "q") in client_ops(client)
        assert client.maintain()["release:q"] == 1
        assert client.maintain().get("release:q") is None  # released once
        got = list(listener.notifies(timeout=2, stop_after=1))
        assert [n.channel for n in got] == ["pglogq.q"]  # idle workers wake at once
    [(released,)] = rows(dsn, "SELECT released_at IS NOT NULL FROM pglogq.subscription WHERE worker_name = 'A'")
    assert released
    b = client.receive("q", "c", worker="B", start_first=1)  # the next to ask takes it
    assert [(m.msg_id, m.retry_count) for m in b] == [(ids[0], 1)]  # A had started the first one
    assert client.heartbeat(a.id) is False


def test_a_released_worker_that_is_alive_keeps_its_batch(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "dead_interval", "1 second")
    client.send_batch("q", [{"n": i} for i in range(2)], type="t")
    client.tick("q", force=True)
    a = client.receive("q", "c", worker="A")
    time.sleep(1.2)
    assert client.maintain()["release:q"] == 1
    assert client.heartbeat(a.id) is True  # back before anyone took it: keeps it
    assert len(client.receive("q", "c", worker="B")) == 0
    assert a.ack()


def client_ops(client: pglogq.Client) -> list[tuple[str, str | None]]:
    return [(r[0], r[1]) for r in rows(client.dsn, "SELECT op, queue_name FROM pglogq.maint_operations()")]


# -- the CLI -------------------------------------------------------------------------------------


def pglogq_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``pglogq`` script."""
    script = Path(sys.executable).parent / "pglogq"
    return subprocess.run([str(script), *args, "--dsn", dsn], capture_output=True, text=True, timeout=60)


def test_cli_cancel_and_its_exit_codes(client: pglogq.Client, dsn: str) -> None:
    ids = setup(client, 3)
    page = client.receive("q", "c", start_first=1)
    r = pglogq_cli(dsn, "cancel", "q", str(ids[2]))
    assert r.returncode == 0 and "cancelled" in r.stdout, r.stderr
    r = pglogq_cli(dsn, "cancel", "q", str(ids[2]), "--json")
    assert r.returncode == 5 and '"cancelled": false' in r.stdout, r
    assert "pglogq: error: message" in r.stderr and "was not cancelled" in r.stderr
    r = pglogq_cli(dsn, "cancel", "q", str(ids[0]))  # started
    assert r.returncode == 5, r
    r = pglogq_cli(dsn, "cancel", "q", str(ids[0]), "--running", "--json")
    assert r.returncode == 0 and '"stop_requested": true' in r.stdout, r
    assert client.stop_requests(page.id, ids) == [ids[0]]
    assert pglogq_cli(dsn, "cancel", "q", "999").returncode == 3  # never issued
    assert pglogq_cli(dsn, "cancel", "nosuch", "1").returncode == 3
    assert pglogq_cli(dsn, "cancel", "q", "x").returncode == 2
    assert pglogq_cli(dsn, "cancel", "q", str(2**63)).returncode in (2, 4)
    assert pglogq_cli(dsn, "cancel", "q", "0").returncode == 3
    client.mark_started(page.messages[2])
    assert page.ack()
    assert pglogq_cli(dsn, "cancel", "q", str(ids[0]), "--running").returncode == 5  # done: nothing runs it
