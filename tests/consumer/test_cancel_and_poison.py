"""Cancel after receive and poison events with the consumer runtime and real worker processes: an event cancelled in
a page already received is never started, a running job sees a stop request, and a handler that
kills its process on one payload ends that event in the dead-letter queue while the rest of its
page is handled (docs/reliability/attacks-jobs-cancel.md)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import pglogq
from tests.support.consumers import MODES, Spec, running
from tests.support.jobs import rows, setup
from tests.support.waiting import wait_for


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- cancel: the consumer runtime ---------------------------------------------------------------


def test_runtime_never_starts_an_event_cancelled_in_its_page(mode: str, client: pglogq.Client, dsn: str) -> None:
    """The case that motivated cancel after receive: a worker busy on job 1, jobs 2 and 3 in the
    same page; cancel(3)."""
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
        wait_for(lambda: seen == [ids[0]], "job 1 to start")
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
        wait_for(lambda: len(steps) > 3, "the report to run")
        assert client.cancel("q", ids[0]) is False
        assert client.cancel("q", ids[0], running=True) is True
        stats = r.join()
    assert len(steps) < 600
    assert stats.handled == 2
    assert client.cancel("q", ids[0], running=True) is False  # done: nothing runs it
    with pytest.raises(pglogq.UnknownMessage):
        client.request_stop("q", 999)


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
            client.maintain()  # maintenance releases it
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


