"""pglogq job wait, job show's history, jobs --state finished, the attempt count of dlq inspect."""

from __future__ import annotations

from typing import Any

import pglogq
from tests.support.cli import fails, js, ok, run
from tests.support.jobs import setup


def consume(dsn: str) -> None:
    c = pglogq.Consumer(dsn, "q", "c", store_result=True, worker="w1")

    @c.handler("t")
    def handle(msg: Any) -> Any:
        if msg.payload["n"] == 1:
            raise pglogq.Nack("bad input")
        return {"n": msg.payload["n"], "ok": True}

    try:
        c.run(stop_when_idle=True)
    finally:
        c.close()


def test_job_wait_show_and_finished_jobs(client: pglogq.Client, dsn: str) -> None:
    done, dead, later = setup(client, 3, max_retries=0)
    client.cancel("q", later)
    consume(dsn)
    assert ok(dsn, "job", "wait", "q", str(done), "--consumer", "c", "--timeout", "30s").stdout.strip() == (
        '{"n": 0, "ok": true}')
    out = js(dsn, "job", "wait", "q", str(done), "-c", "c")
    assert (out["outcome"], out["final"], out["result"], out["worker"], out["attempt"]) == (
        "done", True, {"n": 0, "ok": True}, "w1", 1)
    failed = fails(dsn, 12, "job", "wait", "q", str(dead), "-c", "c")
    assert "ended dead" in failed.output and "bad input" in failed.output
    fails(dsn, 12, "job", "wait", "q", str(later), "-c", "c", "--timeout", "0")  # cancelled before receive
    [other] = client.send_batch("q", [{"n": 9}], type="t")
    timed_out = fails(dsn, 13, "job", "wait", "q", str(other), "-c", "c", "--timeout", "200ms")
    assert "no final outcome" in timed_out.output
    fails(dsn, 3, "job", "wait", "q", str(done), "-c", "ghost")
    assert run(dsn, "job", "wait", "q", str(done)).exit_code == 2  # --consumer is required
    text = ok(dsn, "job", "show", "q", str(done)).stdout
    assert "history" in text and "w1" in text and '"ok": true' in text
    [row] = js(dsn, "job", "show", "q", str(dead))
    assert (row["state"], row["attempts"], [h["outcome"] for h in row["history"]]) == ("dead", 1, ["dead"])
    page = js(dsn, "jobs", "q", "--state", "finished")
    assert {(j["msg_id"], j["state"]) for j in page["jobs"]} == {(done, "done"), (dead, "dead")}
    assert js(dsn, "jobs", "q", "--state", "done", "--since", "1h")["jobs"][0]["msg_id"] == done
    assert "attempt 1" in ok(dsn, "jobs", "q", "--state", "finished").stdout
    assert run(dsn, "jobs", "q", "--state", "retry", "--since", "1h").exit_code == 2
    [dl] = js(dsn, "dlq", "inspect", "q")
    assert (dl["retry_count"], dl["attempts"]) == (0, 1)
    assert "attempts" in ok(dsn, "dlq", "inspect", "q").stdout
