"""The consumer runtime writes the outcome log (job history) and stores results: every handler run
that ends leaves one row, sent with the page's ack; a result above max_result_bytes fails the job
with ResultTooLarge; a job stopped while running is 'stopped' (docs/how-to/job-history.md)."""

from __future__ import annotations

import time
from typing import Any

import pytest

import pglogq
from tests.support.consumers import MODES, Spec, run_once, running
from tests.support.jobs import rows, setup
from tests.support.waiting import wait_for


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_each_handler_run_leaves_its_outcome_and_result(mode: str, client: pglogq.Client, dsn: str) -> None:
    ok, fail, big = setup(client, 3, retry_delay="1 hour", max_result_bytes=50)
    spec = Spec(dsn, "q", "c", kwargs={"store_result": True, "worker": "w1"})

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        if msg.msg_id == fail:
            raise pglogq.Nack("card declined")
        if msg.msg_id == big:
            return "x" * 100
        return {"sum": msg.payload["n"] + 3}

    stats = run_once(mode, spec, stop_when_idle=True)
    assert (stats.handled, stats.failed) == (1, 2)
    done, failed, too_big = (client.lookup("q", m)[0] for m in (ok, fail, big))
    assert (done.state, done.worker, done.attempts, done.result) == ("done", "w1", 1, {"sum": 3})
    assert done.since is not None and done.finished_at is not None and done.since <= done.finished_at
    assert [(h.attempt, h.outcome, h.worker) for h in done.history] == [(1, "done", "w1")]
    assert (failed.state, failed.attempts, [(h.outcome, h.error) for h in failed.history]) == (
        "retry", 1, [("failed", "card declined")])
    assert too_big.state == "retry" and "ResultTooLarge" in (too_big.reason or "")
    assert "max_result_bytes (50)" in (too_big.reason or "")
    assert [h.outcome for h in too_big.history] == ["failed"]
    r = client.result("q", ok, "c", timeout=0)
    assert r is not None and (r.outcome, r.result, r.worker) == ("done", {"sum": 3}, "w1")
    assert {j.msg_id for j in client.jobs("q", state="finished")} == {ok, fail, big}


def test_a_handler_without_store_result_stores_none(mode: str, client: pglogq.Client, dsn: str) -> None:
    [m] = setup(client, 1)
    spec = Spec(dsn, "q", "c")
    spec.handler("t")(lambda msg: {"ignored": True})
    run_once(mode, spec, stop_when_idle=True)
    [j] = client.lookup("q", m)
    assert (j.state, j.result, [h.outcome for h in j.history]) == ("done", None, ["done"])


def test_a_job_stopped_while_running_shows_stopped(mode: str, client: pglogq.Client, dsn: str) -> None:
    [m] = setup(client, 1)
    steps: list[int] = []
    spec = Spec(dsn, "q", "c", kwargs={"heartbeat_interval": 0.1, "progress_interval": 0.05})

    @spec.handler("t")
    def report(msg: Any) -> Any:
        if "async" in type(msg).__name__.lower():

            async def long_report() -> None:
                for step in range(6000):
                    steps.append(step)
                    if not await msg.progress(step / 60, stage="rendering"):
                        return
                    await __import__("asyncio").sleep(0.05)

            return long_report()
        for step in range(6000):
            steps.append(step)
            if not msg.progress(step / 60, stage="rendering"):
                return None
            time.sleep(0.05)
        return None

    with running(mode, spec, stop_when_idle=True) as r:
        wait_for(lambda: len(steps) > 3, "the report to run")
        assert client.cancel("q", m, running=True) is True
        r.join()
    [j] = client.lookup("q", m)
    assert (j.state, [h.outcome for h in j.history]) == ("stopped", ["stopped"])


def test_history_off_the_runtime_acknowledges_plainly(mode: str, client: pglogq.Client, dsn: str) -> None:
    ids = setup(client, 3, history_retention="0")
    spec = Spec(dsn, "q", "c")
    spec.handler("t")(lambda msg: None)
    assert run_once(mode, spec, stop_when_idle=True).handled == 3
    assert [j.state for m in ids for j in client.lookup("q", m)] == ["done"] * 3
    assert rows(dsn, "SELECT count(*) FROM pglogq.outcome") == [(0,)]


def test_a_batch_handler_keeps_no_result(mode: str, client: pglogq.Client, dsn: str) -> None:
    """store_result is for handlers of one message: a batch handler's return value is not a job's."""
    ids = setup(client, 2)
    spec = Spec(dsn, "q", "c", kwargs={"store_result": True})
    spec.batch_handler("t")(lambda msgs: [m.msg_id for m in msgs])
    assert run_once(mode, spec, stop_when_idle=True).handled == 2
    assert [(j.state, j.result, len(j.history)) for m in ids for j in client.lookup("q", m)] == [("done", None, 1)] * 2


def test_a_page_of_plain_runs_is_one_row_of_the_log(mode: str, client: pglogq.Client, dsn: str) -> None:
    """The runtime sends a page's plain runs as one group (arrays in binary): one row, each run
    with its own type and times; the failed and the redelivered runs get rows of their own."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "retry_delay", "0")
    mails = client.send_batch("q", [{"n": i} for i in range(40)], type="mail")
    reports = client.send_batch("q", [{"n": i} for i in range(20)], type="report")
    client.tick("q", force=True)
    tried: set[int] = set()
    spec = Spec(dsn, "q", "c", kwargs={"max_messages": 100})

    @spec.handler("mail", "report")
    def handle(msg: Any) -> None:
        if msg.msg_id == reports[3] and msg.msg_id not in tried:
            tried.add(msg.msg_id)
            raise pglogq.Nack("later")

    stats = run_once(mode, spec, stop_when_idle=True)
    assert (stats.pages, stats.handled, stats.failed) == (1, 59, 1)
    client.maintain()  # the retry is due: back in the queue
    client.tick("q", force=True)
    assert run_once(mode, spec, stop_when_idle=True).handled == 1
    log = rows(dsn, "SELECT outcome, attempt, ev_type, types IS NOT NULL, cardinality(msg_ids) FROM pglogq.outcome"
                    " ORDER BY seq")
    assert log[0] == ("done", 1, None, True, 59)  # the first page: both types, one row
    assert sorted(log[1:]) == [("done", 2, "report", False, 1), ("failed", 1, "report", False, 1)]
    assert [j.msg_id for j in client.jobs("q", state="done", type="report", limit=100)][-19:] == [
        m for m in reversed(reports) if m != reports[3]]
    [j] = client.lookup("q", mails[7])
    assert (j.state, j.type, j.attempts, [h.outcome for h in j.history]) == ("done", "mail", 1, ["done"])
    assert j.since is not None and j.finished_at is not None and j.since <= j.finished_at
    [j] = client.lookup("q", reports[3])
    assert (j.state, j.attempts) == ("done", 2)
    assert [(h.attempt, h.outcome) for h in j.history] == [(1, "failed"), (2, "done")]


def test_a_page_of_one_run_of_ids_sends_its_range(mode: str, client: pglogq.Client, dsn: str) -> None:
    """One producer's events are one ascending run of ids: the runtime sends their range, not the
    ids, and each run is still found and listed with its own times."""
    ids = setup(client, 30)
    spec = Spec(dsn, "q", "c", kwargs={"max_messages": 100, "worker": "w1"})
    spec.handler("t")(lambda msg: None)
    assert run_once(mode, spec, stop_when_idle=True).handled == 30
    assert rows(dsn, "SELECT msg_ids IS NULL, id_range::text, cardinality(started), ev_type FROM pglogq.outcome") == [
        (True, f"[{ids[0]},{ids[-1] + 1})", 30, "t")]
    [j] = client.lookup("q", ids[17])
    assert (j.state, j.worker, j.attempts, [h.outcome for h in j.history]) == ("done", "w1", 1, ["done"])
    assert j.since is not None and j.finished_at is not None and j.since <= j.finished_at
    assert [j.msg_id for j in client.jobs("q", state="finished", limit=100)] == ids[::-1]
