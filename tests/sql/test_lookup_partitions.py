"""lookup, jobs and in_flight answer the same on a partitioned queue as on a queue of one partition.

Every test runs twice, with partitions=1 and partitions=4, and asserts the same answer: the two
paths (the consumer's own row or a cooperating worker's row; a partition's stream leased to a
worker) are pinned together.  The events carry one key, so on four partitions they share one
stream."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg
import pytest

import pglogq
from tests.support.draining import drain
from tests.support.maintenance import pump_and_tick

PARTITIONS = pytest.mark.parametrize("partitions", [1, 4])


def setup(client: pglogq.Client, partitions: int) -> list[int]:
    client.create_queue("q", partitions=partitions)
    client.subscribe("q", "c")
    ids = [client.send("q", {"n": n}, key="order-1") for n in range(3)]
    client.tick("q", force=True)
    return ids


@PARTITIONS
@pytest.mark.parametrize("worker", ["w-named", None])
def test_the_worker_named_at_receive_is_shown_before_and_after_progress(
    client: pglogq.Client, partitions: int, worker: str | None
) -> None:
    first, *_ = setup(client, partitions)
    batch = client.receive("q", "c", worker=worker)
    assert batch.messages[0].msg_id == first
    holder = worker or "c"  # the consumer itself when no worker name was given
    [j] = client.lookup("q", first)
    assert (j.state, j.worker) == ("in-flight", holder)
    assert [(r.msg_id, r.worker) for r in client.jobs("q", "c", state="in-flight")] == [
        (m.msg_id, holder) for m in batch
    ]
    assert client.report_progress(batch.id, first, percent=25, stage="half way")
    [j] = client.lookup("q", first)
    assert (j.state, j.worker, j.percent, j.stage) == ("in-flight", holder, 25.0, "half way")
    assert [(r.msg_id, r.worker) for r in client.jobs("q", "c", state="in-flight")] == [
        (m.msg_id, holder) for m in batch
    ]
    # the view names the worker given to receive (the consumer itself reports no worker name)
    assert [(f.msg_id, f.worker) for f in client.in_flight("q")] == [(first, worker)]
    # a label given with the report wins, on both paths
    assert client.report_progress(batch.id, first, worker="host:1:label")
    assert [(f.msg_id, f.worker) for f in client.in_flight("q")] == [(first, "host:1:label")]
    assert client.lookup("q", first)[0].worker == "host:1:label"
    batch.ack()
    assert client.in_flight("q") == []


@PARTITIONS
def test_in_flight_view_names_the_worker_through_sql(dsn: str, client: pglogq.Client, partitions: int) -> None:
    first, *_ = setup(client, partitions)
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(batch_id,)] = conn.execute(
            "SELECT DISTINCT batch_id FROM pglogq.receive('q', 'c', 10, 'w-sql')").fetchall()
        conn.execute("SELECT pglogq.report_progress(%s, %s, 50)", (batch_id, first))
        assert conn.execute("SELECT msg_id, worker FROM pglogq.in_flight").fetchall() == [(first, "w-sql")]
        assert conn.execute("SELECT state, worker FROM pglogq.lookup('q', %s)", (first,)).fetchall() == [
            ("in-flight", "w-sql")]


def retry_rows(client: pglogq.Client, msg_id: int) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    [j] = client.lookup("q", msg_id)
    listed = [(r.state, r.msg_id, r.attempts, r.reason, r.due_at) for r in client.jobs("q", "c", state="retry")]
    return [(j.state, j.msg_id, j.attempts, j.reason, j.due_at)], listed


@PARTITIONS
def test_a_nack_with_a_delay_shows_as_retry_in_lookup_and_jobs(client: pglogq.Client, partitions: int) -> None:
    first, second, third = setup(client, partitions)
    batch = client.receive("q", "c", worker="w1")
    before = datetime.now().astimezone()
    assert client.nack(batch.messages[0], reason="no stock", retry_after=timedelta(hours=1)) == "retry"
    # nacked, not acknowledged yet
    [j], listed = retry_rows(client, first)
    assert j[:4] == ("retry", first, 1, "no stock") and isinstance(j[4], datetime)
    assert j[4] >= before + timedelta(minutes=59)
    assert listed == [j]
    assert first not in [r.msg_id for r in client.jobs("q", "c", state="in-flight")]
    batch.ack()
    # acknowledged: it waits for its due time
    assert retry_rows(client, first) == ([j], [j])
    assert first not in [r.msg_id for r in client.jobs("q", "c")
                         if r.state != "retry"]
    [row] = [r for r in client.jobs("q", "c") if r.msg_id == first]
    assert row.since is not None and row.since >= before - timedelta(seconds=5)
    assert {r.state for r in client.jobs("q", "c") if r.msg_id in (second, third)} <= {"waiting", "in-flight"}
    assert client.lookup("q", first)[0].detail == "failed 1 time(s); comes back at its due time"
    # paging through the retry state: the cursor of the row lists nothing after it
    assert client.jobs("q", "c", state="retry", after=client.jobs("q", "c", state="retry")[0].cursor) == []


@PARTITIONS
def test_a_retried_event_counts_its_attempts_and_keeps_the_last_reason(
    client: pglogq.Client, partitions: int
) -> None:
    client.create_queue("q", partitions=partitions)
    client.subscribe("q", "c")
    client.set_queue_config("q", "max_retries", 5)
    m = client.send("q", {}, key="order-1")
    client.tick("q", force=True)
    for n in (1, 2):
        # retry_after=0: due at once; on one partition the pump puts it back in the log
        batch = client.receive("q", "c")
        assert [x.msg_id for x in batch] == [m]
        assert client.nack(batch.messages[0], reason=f"try {n}", retry_after=timedelta(0)) == "retry"
        batch.ack()
        [j] = client.lookup("q", m)
        assert (j.state, j.attempts, j.reason) == ("retry", n, f"try {n}")
        [r] = client.jobs("q", "c", state="retry")
        assert (r.msg_id, r.attempts, r.reason) == (m, n, f"try {n}")
        pump_and_tick(client, "q")
    got = drain(client, "q", "c")
    assert [(x.msg_id, x.retry_count) for x in got] == [(m, 2)]
    assert [j.state for j in client.lookup("q", m)] == ["done"]
    assert client.jobs("q", "c", state="retry") == []
