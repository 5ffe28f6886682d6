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
    one_type = len(set(types)) == 1  # as the runtime: the one type, else each one's
    group: tuple[Any, ...] = (  # the bounds left to the server (the runtime gives them)
        (ids, starts, ends, None if one_type else types, types[0] if one_type else None, None, None, None, None)
        if plain else (None,) * 9
    )
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
    assert err.value.sqlstate == "PQ094"
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
        ({"msg_ids": [0]}, "below 1"),
        ({"msg_ids": [None]}, "below 1"),
        ({"msg_ids": [[1]]}, "differ in length"),
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


@pytest.mark.parametrize(
    ("id_range", "finished_range", "why"),
    [
        ("[2,3]", None, "id_range"),  # leaves the first id out
        ("empty", None, "id_range"),
        (None, [0.0, 1.0], "finished_range"),  # leaves the ends out
        (None, [0.0, 1e12, 2e12], "finished_range"),
    ],
)
def test_bounds_that_do_not_hold_the_arrays_are_refused(
    client: pglogq.Client, id_range: str | None, finished_range: list[float] | None, why: str
) -> None:
    ids = setup(client, 3)
    batch = client.receive("q", "a")
    now = time.time()
    with psycopg.connect(str(client.dsn), autocommit=True) as conn, pytest.raises(psycopg.Error) as err:
        conn.execute("SELECT pglogq.record_outcomes(%s, %s::int8[], NULL, NULL, %s::float8[],"
                     " id_range => %s::int8range, finished_range => %s::float8[])",
                     (batch.id, ids, [now] * 3, id_range, finished_range))
    assert err.value.sqlstate == "PQ019" and why in str(err.value)
    assert client.lookup("q", ids[0])[0].history == []


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


def record(client: pglogq.Client, batch: pglogq.Batch, ids: list[int] | None, **arrays: Any) -> int:
    """pglogq.record_outcomes on ``batch`` (left open) for ``ids``, the other arrays by name."""
    names = ["attempts", "started_at", "finished_at", "outcomes", "errors", "results", "types", "msg_type",
             "id_range"]
    casts = ["int4[]", "float8[]", "float8[]", "text[]", "text[]", "text[]", "text[]", "text", "int8range"]
    sql = "SELECT pglogq.record_outcomes(%s, %s::int8[], " + ", ".join(
        f"{n} => %s::{c}" for n, c in zip(names, casts, strict=True)) + ")"
    params = (batch.id, ids, *(arrays.get(n) for n in names))
    with psycopg.connect(str(client.dsn), autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def log_rows(dsn: str) -> list[tuple[Any, ...]]:
    """The outcome log's rows: (outcome, attempt, error, ev_type, msg_ids, result), in the order recorded."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT outcome, attempt, error, ev_type, msg_ids, result::text FROM pglogq.outcome"
                            " ORDER BY seq").fetchall()


def test_a_page_of_plain_runs_is_one_row_whatever_its_size(client: pglogq.Client, dsn: str) -> None:
    """The log's cost is the page's: done on the first delivery, no result, is one row for all."""
    ids = setup(client, 500)
    batch = client.receive("q", "a", max_messages=500)
    assert len(batch.messages) == 500
    t0 = time.time() - 10
    assert ack_with(client, batch, worker_started=t0) == (True, 500)
    assert log_rows(dsn) == [("done", 1, None, "job", ids, None)]
    [j] = client.lookup("q", ids[250])
    [h] = j.history
    assert (j.state, j.worker, h.outcome, h.attempt) == ("done", "a", "done", 1)
    assert j.since is not None and abs(j.since.timestamp() - t0) < 0.01
    assert h.duration is not None and abs(h.duration.total_seconds() - 0.5) < 0.01


def test_other_runs_are_grouped_alike_and_a_result_has_its_own_row(client: pglogq.Client, dsn: str) -> None:
    ids = setup(client, 7)
    batch = client.receive("q", "a")
    outcomes = ["done", "failed", "failed", "done", "dead", "done", "failed"]
    errors = [None, "e", "e", None, "boom", None, "other"]
    results = [None, None, None, '{"n": 3}', None, None, None]
    assert ack_with(client, batch, outcomes=outcomes, errors=errors, results=results) == (True, 7)
    got = sorted((o, a, e, t, m, r) for o, a, e, t, m, r in log_rows(dsn))
    assert got == sorted([
        ("done", 1, None, "job", [ids[0], ids[5]], None),
        ("done", 1, None, "job", [ids[3]], '{"n": 3}'),
        ("failed", 1, "e", "job", [ids[1], ids[2]], None),
        ("failed", 1, "other", "job", [ids[6]], None),
        ("dead", 1, "boom", "job", [ids[4]], None),
    ])
    r = client.result("q", ids[3], "a", timeout=0)
    assert r is not None and (r.outcome, r.result) == ("done", {"n": 3})
    for m, outcome, error in zip(ids, outcomes, errors, strict=True):
        [h] = client.lookup("q", m)[0].history
        assert (h.outcome, h.error) == (outcome, error)


def test_an_event_is_found_among_rows_whose_id_ranges_overlap(client: pglogq.Client, dsn: str) -> None:
    """A page's ids come in commit order, not id order, and a redelivery has its old id: the id
    ranges of rows overlap; each event's runs are still exactly its own, per consumer."""
    ids = setup(client, 12, consumers=("a", "b"))
    batch_a = client.receive("q", "a")
    batch_b = client.receive("q", "b")
    t = time.time() - 100
    first = [ids[9], ids[0], ids[6], ids[11]]  # range [ids[0], ids[11]]
    second = [ids[4], ids[2], ids[7]]  # inside it
    assert record(client, batch_a, first, started_at=[t, t + 1, t + 2, t + 3], finished_at=[t + 5] * 4) == 4
    assert record(client, batch_a, second, attempts=[2, 2, 2], started_at=[t + 10] * 3,
                  finished_at=[t + 11, t + 12, t + 13], outcomes=["failed"] * 3, errors=["x"] * 3) == 3
    assert record(client, batch_a, [ids[0]], attempts=[2], finished_at=[t + 20], outcomes=["dead"]) == 1
    assert record(client, batch_b, second, msg_type="other") == 3
    with psycopg.connect(dsn, autocommit=True) as conn:
        ranges = conn.execute("SELECT id_range::text FROM pglogq.outcome ORDER BY seq").fetchall()
    assert ranges[:2] == [(f"[{ids[0]},{ids[11] + 1})",), (f"[{ids[2]},{ids[7] + 1})",)]

    def runs(m: int, consumer: str) -> list[tuple[Any, ...]]:
        [j] = [j for j in client.lookup("q", m) if j.consumer == consumer]
        return [(h.attempt, h.outcome, h.started_at.timestamp() if h.started_at else None) for h in j.history]

    assert runs(ids[0], "a") == [(1, "done", pytest.approx(t + 1)), (2, "dead", None)]
    assert runs(ids[6], "a") == [(1, "done", pytest.approx(t + 2))]
    assert runs(ids[7], "a") == [(2, "failed", pytest.approx(t + 10))]
    assert runs(ids[1], "a") == runs(ids[3], "a") == []  # inside both ranges, in neither row
    assert [(h.attempt, h.outcome) for h in client.lookup("q", ids[7])[1].history] == [(1, "done")]
    assert runs(ids[0], "b") == []
    r = client.result("q", ids[0], "a", timeout=0)
    assert r is not None and (r.outcome, r.attempt) == ("dead", 2)
    r = client.result("q", ids[4], "b", timeout=0)
    assert r is not None and r.outcome == "done" and client.result("q", ids[4], "a", timeout=0) is None


def test_jobs_pages_through_a_large_group_run_by_run(client: pglogq.Client) -> None:
    """A cursor can stop inside a row of the log: the next page goes on from the run after it."""
    client.create_queue("q")
    client.subscribe("q", "a")
    ids = client.send_batch("q", [{"i": i} for i in range(300)], type="mail")
    client.tick("q", force=True)
    batch = client.receive("q", "a", max_messages=300)
    t = time.time() - 100
    types = ["mail" if i % 3 else "report" for i in range(250)]
    assert record(client, batch, ids[:250], started_at=[t + i for i in range(250)],
                  finished_at=[t + i + 0.5 for i in range(250)], types=types) == 250
    assert record(client, batch, ids[250:], attempts=[1] * 50, finished_at=[t + 300] * 50,
                  outcomes=["failed"] * 50, errors=["e"] * 50, msg_type="mail") == 50
    seen: list[int] = []
    after = None
    while True:
        page = client.jobs("q", state="finished", limit=7, after=after)
        seen += [j.msg_id for j in page]
        if len(page) < 7:
            break
        after = page[-1].cursor
    # the newest row first (the failed ones), each row's runs last first
    assert seen == ids[250:][::-1] + ids[:250][::-1]
    with pytest.raises(pglogq.InvalidJobsQuery, match="finished jobs"):  # a cursor of the other list
        client.jobs("q", after=after)
    current = client.jobs("q", limit=1)[0].cursor
    with pytest.raises(pglogq.InvalidJobsQuery, match="current jobs"):
        client.jobs("q", state="finished", after=current)
    reports = client.jobs("q", state="done", type="report", limit=1000)
    assert [j.msg_id for j in reports] == [ids[i] for i in reversed(range(250)) if i % 3 == 0]
    assert all(j.type == "report" and j.state == "done" and j.attempts == 1 for j in reports)
    [j] = client.jobs("q", state="done", limit=1)
    assert j.since is not None and j.since.timestamp() == pytest.approx(t + 249)
    assert j.finished_at is not None and j.finished_at.timestamp() == pytest.approx(t + 249.5)
    # the time filters apply to each run's own end, inside a row too
    since = datetime.fromtimestamp(t + 200, timezone.utc)
    until = datetime.fromtimestamp(t + 210, timezone.utc)
    window = client.jobs("q", state="done", since=since, until=until, limit=1000)
    assert [j.msg_id for j in window] == ids[200:210][::-1]


def test_the_notification_names_the_consumer_and_the_id_range(client: pglogq.Client, dsn: str) -> None:
    """A result waiter looks again only for a page that may hold its id."""
    ids = setup(client, 3)
    batch = client.receive("q", "a")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pglogq.outcome.q"')
        ack_with(client, batch)
        notes = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert notes == [f"a {ids[0]} {ids[2]}"]
    from pglogq._convert import outcome_note

    assert outcome_note(notes[0], "a", ids[1]) and not outcome_note(notes[0], "b", ids[1])
    assert not outcome_note(notes[0], "a", ids[2] + 1) and not outcome_note(notes[0], "a", ids[0] - 1)


def test_the_runtime_binary_arrays_read_back_exactly(dsn: str) -> None:
    """The arrays the runtime builds in PostgreSQL's binary format (no Python per element)."""
    from pglogq import _outcomes_async as o

    big = [1, -1, 2**63 - 1, -(2**63), 0, 4711]
    floats = [0.0, -1.5, 1.7e9 + 0.123456, 1e-300, float("inf")]
    texts = ["mail", None, "", "é 🐍", "mail"]
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        for cls, dumper in o._DUMPERS:
            cur.adapters.register_dumper(cls, dumper)
        cur.execute("SELECT %s::int8[], %s::float8[], %s::text[], %s::int8[]",
                    (o._Int8Array(o._eight_byte_array(big, "q", 20)),
                     o._Float8Array(o._eight_byte_array(floats, "d", 701)),
                     o._TextArray(o._text_array(texts)), o._Int8Array(o._eight_byte_array([], "q", 20))))
        assert cur.fetchone() == (big, floats, texts, [])


def test_a_run_of_ids_is_stored_as_its_range(client: pglogq.Client, dsn: str) -> None:
    """msg_ids NULL with id_range: the ids are the range's, in order (one producer's page: no ids
    sent or stored); lookup, result and jobs read them as if they were listed."""
    ids = setup(client, 8)
    batch = client.receive("q", "a")
    t = time.time() - 50
    run = f"[{ids[2]},{ids[6]}]"
    assert record(client, batch, None, started_at=[t + i for i in range(5)],
                  finished_at=[t + i + 0.25 for i in range(5)], id_range=run, msg_type="job") == 5
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT msg_ids, id_range::text, cardinality(finished) FROM pglogq.outcome").fetchall() == [
            (None, f"[{ids[2]},{ids[6] + 1})", 5)]
    for i in range(2, 7):
        [h] = client.lookup("q", ids[i])[0].history
        assert h.started_at is not None and h.started_at.timestamp() == pytest.approx(t + i - 2)
    assert client.lookup("q", ids[1])[0].history == client.lookup("q", ids[7])[0].history == []
    r = client.result("q", ids[6], "a", timeout=0)
    assert r is not None and r.finished_at is not None and r.finished_at.timestamp() == pytest.approx(t + 4.25)
    listed = client.jobs("q", state="done", limit=3)
    listed += client.jobs("q", state="done", after=listed[-1].cursor)
    assert [(j.msg_id, j.type) for j in listed] == [(m, "job") for m in reversed(ids[2:7])]
    # grouped (an outcome given): the run's ids listed
    assert record(client, batch, None, started_at=[t, t], finished_at=[t + 1, t + 1], outcomes=["failed", "failed"],
                  errors=["x", "x"], id_range=f"[{ids[0]},{ids[1]}]") == 2
    assert [h.outcome for h in client.lookup("q", ids[1])[0].history] == ["failed"]
    assert log_rows(dsn)[-1][:5] == ("failed", 1, "x", None, [ids[0], ids[1]])


@pytest.mark.parametrize(
    ("id_range", "finished", "why"),
    [
        ("[3,7]", [1.0] * 4, "differ in length"),
        ("[0,4]", [1.0] * 5, "below 1"),
        ("[1,200000]", None, "too many"),
    ],
)
def test_a_run_of_ids_is_checked(client: pglogq.Client, id_range: str, finished: list[float] | None, why: str) -> None:
    ids = setup(client, 3)
    batch = client.receive("q", "a")
    with pytest.raises(psycopg.Error) as err:
        record(client, batch, None, finished_at=finished, id_range=id_range)
    assert err.value.sqlstate == "PQ019" and why in str(err.value)
    assert client.lookup("q", ids[0])[0].history == []
