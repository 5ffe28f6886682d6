"""The outcome log (job history and results): pglogq.record_outcomes, lookup's history, jobs' finished
rows, result, the attempt count, and the log's rotation by TRUNCATE.

Every outcome is written through the SQL API on a real server, in the statement that acknowledges
its page, exactly as the consumer runtime does."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq import _queries as q
from pglogq.errors import translate


def setup(client: pglogq.Client, n: int = 1, consumers: tuple[str, ...] = ("a",), type: str = "job") -> list[int]:
    client.create_queue("q")
    for c in consumers:
        client.subscribe("q", c)
    ids = client.send_batch("q", [{"i": i} for i in range(n)], type=type)
    client.tick("q", force=True)
    return ids


def ack_with(client: pglogq.Client, batch: pglogq.Batch, outcomes: list[str] | None = None,
             errors: list[str | None] | None = None, results: list[str | None] | None = None,
             worker_started: float | None = None) -> tuple[bool, int]:
    """Acknowledge ``batch`` with its outcomes, in one statement (the runtime's ACK_OUTCOMES): a
    page of plain runs (no outcomes, errors or results given) as the runtime's one group, any
    other one by one."""
    ms = batch.messages
    t = worker_started or time.time() - 1
    last = ms[-1]
    ids, starts, ends, types = [m.msg_id for m in ms], [t] * len(ms), [t + 0.5] * len(ms), [m.type for m in ms]
    plain = outcomes is None and errors is None and results is None and not any(m.retry_count for m in ms)
    group: tuple[Any, ...] = (ids, starts, ends, types, None) if plain else (None,) * 5
    one_by_one: tuple[Any, ...] = (
        (None,) * 8 if plain else
        (ids, [m.retry_count + 1 for m in ms], starts, ends, outcomes, errors, results, types)
    )
    params = (batch.id, *group, batch.id, *one_by_one, batch.id, last.msg_id, last.txid)
    with psycopg.connect(client.dsn, autocommit=True) as conn:
        try:
            row = conn.execute(q.ACK_OUTCOMES, params).fetchone()
        except psycopg.Error as exc:
            raise translate(exc) from exc
    assert row is not None
    return bool(row[0]), int(row[1])


def test_a_finished_job_tells_who_when_and_how(client: pglogq.Client) -> None:
    [m] = setup(client)
    batch = client.receive("q", "a", worker="w1")
    t0 = time.time() - 2
    assert ack_with(client, batch, results=['{"rows": 42}'], worker_started=t0) == (True, 1)
    [j] = client.lookup("q", m)
    assert (j.state, j.worker, j.attempts, j.result) == ("done", "w1", 1, {"rows": 42})
    assert j.since is not None and j.finished_at is not None and j.finished_at > j.since
    assert abs(j.since.timestamp() - t0) < 0.01
    [h] = j.history
    assert (h.attempt, h.outcome, h.worker, h.error) == (1, "done", "w1", None)
    assert h.duration is not None and abs(h.duration.total_seconds() - 0.5) < 0.01


def test_every_attempt_is_kept_and_the_attempt_count_is_one(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    client.set_queue_config("q", "max_retries", 1)
    [m] = [client.send("q", {"x": 1}, type="job")]
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    assert client.lookup("q", m)[0].attempts == 1  # in flight: the first attempt
    assert client.nack(batch.messages[0], reason="boom", retry_after=timedelta(0)) == "retry"
    assert ack_with(client, batch, outcomes=["failed"], errors=["boom"]) == (True, 1)
    j = client.lookup("q", m)[0]
    assert (j.state, j.attempts) == ("retry", 1)  # one failed attempt so far
    client.maintain()
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    assert batch.messages[0].retry_count == 1
    assert client.lookup("q", m)[0].attempts == 2
    assert client.nack(batch.messages[0], reason="boom again") == "dead"
    assert ack_with(client, batch, outcomes=["dead"], errors=["boom again"]) == (True, 1)
    j = client.lookup("q", m)[0]
    [dl] = client.dlq_inspect("q")
    assert (j.state, j.attempts, dl.attempts) == ("dead", 2, 2)  # one count everywhere
    assert [(h.attempt, h.outcome, h.error) for h in j.history] == [(1, "failed", "boom"), (2, "dead", "boom again")]
    [row] = client.jobs("q", state="dead")
    assert row.attempts == 2


def test_stopped_while_running_is_its_own_state(client: pglogq.Client) -> None:
    [m] = setup(client)
    batch = client.receive("q", "a", start_first=1)
    assert client.cancel("q", m, running=True)  # started: asked to stop
    assert ack_with(client, batch, outcomes=["stopped"]) == (True, 1)
    [j] = client.lookup("q", m)
    assert j.state == "stopped" and "stop request" in (j.detail or "")
    assert client.result("q", m, "a", timeout=0) is not None


def test_result_is_final_or_not(client: pglogq.Client) -> None:
    [m, n] = setup(client, 2)
    assert client.result("q", m, "a", timeout=0) is None  # nothing known yet
    batch = client.receive("q", "a")
    client.nack(batch.messages[0], reason="later", retry_after=timedelta(hours=1))
    ack_with(client, batch, outcomes=["failed", "done"], errors=["later", None], results=[None, "[1, 2]"])
    assert client.result("q", m, "a", timeout=0) is None  # failed: it comes again
    r = client.result("q", n, "a", timeout=0)
    assert r is not None and (r.outcome, r.final, r.result, r.attempt) == ("done", True, [1, 2], 1)
    with pytest.raises(pglogq.UnknownConsumer):
        client.result("q", n, "nobody", timeout=0)
    with pytest.raises(pglogq.UnknownMessage):
        client.result("q", 10**9, "a", timeout=0)
    with pytest.raises(pglogq.InvalidArgument):
        client.result("q", n, "a", timeout=-1)


def test_a_result_too_large_is_refused_and_nothing_changes(client: pglogq.Client) -> None:
    [m] = setup(client)
    client.set_queue_config("q", "max_result_bytes", 10)
    batch = client.receive("q", "a")
    with pytest.raises(pglogq.ResultTooLarge) as err:
        ack_with(client, batch, results=['"0123456789abc"'])
    assert err.value.sqlstate == "PQ093"
    [j] = client.lookup("q", m)
    assert (j.state, j.history) == ("in-flight", [])  # neither stored nor acknowledged
    assert ack_with(client, batch, results=['"short"']) == (True, 1)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"attempts": []}, "differ in length"),
        ({"outcomes": ["nope"]}, "unknown outcome"),
        ({"attempts": [0]}, "below 1"),
        ({"results": ["{not json"]}, "not valid JSON"),
    ],
)
def test_bad_outcomes_are_refused_and_change_nothing(client: pglogq.Client, change: dict[str, Any], why: str) -> None:
    [m] = setup(client)
    batch = client.receive("q", "a")
    args: dict[str, Any] = {"msg_ids": [m], "attempts": [1], "started_at": [time.time()], "outcomes": None,
                            "results": None, **change}
    with psycopg.connect(client.dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as err:
        conn.execute("SELECT pglogq.record_outcomes(%s, %s::int8[], %s::int4[], %s::float8[], NULL, %s::text[],"
                     " NULL, %s::text[])",
                     (batch.id, args["msg_ids"], args["attempts"], args["started_at"], args["outcomes"],
                      args["results"]))
    assert err.value.sqlstate == "PQ019" and why in str(err.value)
    assert client.lookup("q", m)[0].history == []


def test_a_stale_batch_records_nothing(client: pglogq.Client) -> None:
    [m] = setup(client)
    batch = client.receive("q", "a")
    assert ack_with(client, batch) == (True, 1)
    with pytest.raises(pglogq.StaleBatch):
        ack_with(client, batch)  # acknowledged already: neither stored again nor acknowledged
    assert len(client.lookup("q", m)[0].history) == 1


def test_history_off_stores_nothing(client: pglogq.Client) -> None:
    [m] = setup(client)
    client.set_queue_config("q", "history_retention", "0")
    batch = client.receive("q", "a")
    assert ack_with(client, batch) == (True, 0)
    [j] = client.lookup("q", m)
    assert (j.state, j.history, j.worker) == ("done", [], None)


def test_jobs_lists_finished_jobs_by_state_type_time_and_consumer_in_pages(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    client.subscribe("q", "b")
    ids = client.send_batch("q", [{"i": i} for i in range(7)], type="mail")
    ids += client.send_batch("q", [{"i": i} for i in range(3)], type="report")
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    outcomes = ["done"] * 10
    outcomes[2] = outcomes[8] = "failed"
    outcomes[5] = "cancelled"
    before = datetime.now(timezone.utc)
    ack_with(client, batch, outcomes=outcomes, errors=["e" if o == "failed" else None for o in outcomes])
    assert client.jobs("q", state="finished", consumer="b") == []
    # every finished job, newest first, in pages of 3 (the same finished_at: by the order recorded)
    seen: list[int] = []
    after = None
    while True:
        page = client.jobs("q", state="finished", limit=3, after=after)
        seen += [j.msg_id for j in page]
        assert all(j.consumer == "a" and j.finished_at is not None and j.worker == "a" for j in page)
        if len(page) < 3:
            break
        after = page[-1].cursor
    assert sorted(seen) == sorted(ids) and len(seen) == 10
    assert [j.msg_id for j in client.jobs("q", state="failed")] == [ids[8], ids[2]]
    assert [j.msg_id for j in client.jobs("q", state="cancelled")] == [ids[5]]
    assert {j.msg_id for j in client.jobs("q", state="done", type="report")} == {ids[7], ids[9]}
    assert client.jobs("q", state="finished", since=datetime.now(timezone.utc) + timedelta(hours=1)) == []
    assert len(client.jobs("q", state="finished", since=before - timedelta(minutes=1),
                           until=datetime.now(timezone.utc) + timedelta(minutes=1))) == 10
    with pytest.raises(pglogq.InvalidJobsQuery):
        client.jobs("q", state="retry", since=before)
    with pytest.raises(pglogq.InvalidJobsQuery):
        client.jobs("q", state="finishd")


def test_the_log_rotates_by_truncate_and_keeps_its_retention(client: pglogq.Client, dsn: str) -> None:
    [m] = setup(client)
    batch = client.receive("q", "a")
    ack_with(client, batch)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ops = [r[0] for r in conn.execute("SELECT op FROM pglogq.maint_operations()")]
        assert "history" in ops  # the first switch is due at once
        switched = [conn.execute("SELECT pglogq.maint_rotate_history(true)").fetchone() for _ in range(2)]
        assert switched == [(True,), (True,)]
        assert len(client.lookup("q", m)[0].history) == 1  # two switches keep the row
        assert conn.execute("SELECT pglogq.maint_rotate_history(true)").fetchone() == (True,)
        assert client.lookup("q", m)[0].history == []  # the third empties its slot
        assert conn.execute("SELECT count(*) FROM pglogq.outcome").fetchone() == (0,)
        assert "history" not in [r[0] for r in conn.execute("SELECT op FROM pglogq.maint_operations()")]
        with pytest.raises(psycopg.Error) as err:
            conn.execute("SELECT pglogq.maint_run('history', 'q')")
        assert err.value.sqlstate == "PQ019"


def test_rows_older_than_the_retention_are_not_shown(client: pglogq.Client, dsn: str) -> None:
    [m] = setup(client)
    batch = client.receive("q", "a")
    ack_with(client, batch, worker_started=time.time() - 7200)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.outcome SET finished_at = now() - interval '2 hours'")
    assert len(client.lookup("q", m)[0].history) == 1
    client.set_queue_config("q", "history_retention", "1 hour")
    assert client.lookup("q", m)[0].history == []
    assert client.jobs("q", state="finished") == []
