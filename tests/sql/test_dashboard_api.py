"""The SQL functions and client methods the dashboard reads through: dlq_search,
dlq_text, dlq_count, ticker_holder, stored_events, ticker_last_run -- their contracts and the
attacks on them (docs/reliability/attacks-dashboard.md)."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

import pglogq
from pglogq.errors import InvalidArgument, UnknownConsumer, UnknownDeadLetter, UnknownQueue
from tests.support.dashboard import make_dead_letters as dead_letters
from tests.support.waiting import wait_for

INT4 = 2**31
INT8_MAX = 2**63 - 1


@pytest.fixture
def two_queues(client: pglogq.Client) -> dict[str, list[int]]:
    for q in ("a", "b"):
        client.create_queue(q)
        client.subscribe(q, "c")
        client.subscribe(q, "d")
    return {
        "a": dead_letters(client, "a", "c", [{"i": i, "word": "Needle" if i == 3 else "hay"} for i in range(7)],
                          type="t1", reason="boom"),
        "b": dead_letters(client, "b", "c", [{"i": i} for i in range(2)], type="t2"),
    }


def test_dlq_search_pages_newest_first(client: pglogq.Client, two_queues: dict[str, list[int]]) -> None:
    page1 = client.dlq_search("a", limit=3)
    assert [d.msg_id for d in page1] == sorted(two_queues["a"], reverse=True)[:3]
    page2 = client.dlq_search("a", limit=3, before=page1[-1].dead_id)
    page3 = client.dlq_search("a", limit=3, before=page2[-1].dead_id)
    ids = [d.dead_id for d in page1 + page2 + page3]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 7
    assert client.dlq_search("a", before=min(ids)) == []
    assert {d.queue_name for d in client.dlq_search("a", limit=1000)} == {"a"}  # never the other queue's


def test_dlq_search_filters(client: pglogq.Client, two_queues: dict[str, list[int]]) -> None:
    assert len(client.dlq_search("a", search="needle")) == 1  # any case
    assert len(client.dlq_search("a", search="BOOM")) == 7  # the reason
    assert len(client.dlq_search("a", search="T1")) == 7  # the type
    assert client.dlq_search("a", search="%") == [] and client.dlq_search("a", search="_") == []  # no LIKE patterns
    assert len(client.dlq_search("a", search="")) == 7  # '' is no filter
    assert client.dlq_search("a", "d") == []
    assert len(client.dlq_search("a", type="t1")) == 7 and client.dlq_search("a", type="t2") == []
    assert client.dlq_search("a", older_than=timedelta(hours=1)) == []
    mid = two_queues["a"][2]
    assert [d.msg_id for d in client.dlq_search("a", msg_id=mid)] == [mid]
    assert client.dlq_search("a", msg_id=two_queues["b"][0]) == [] or two_queues["b"][0] in two_queues["a"]
    assert client.dlq_count("a") == 7 and client.dlq_count("a", "d") == 0 and client.dlq_count("a", type="t2") == 0


def test_dlq_search_previews(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    dead_letters(client, "q", "c", [{"s": "é" * 3000}], headers={"h": "x" * 50})
    (d,) = client.dlq_search("q", preview_chars=100)
    assert len(d.payload_text) == 100 and d.payload_chars > 3000 and d.truncated
    assert len(d.headers_text or "") == 100 - 0 or d.headers_chars <= 100
    (whole,) = client.dlq_search("q", preview_chars=None)
    assert len(whole.payload_text) == whole.payload_chars and not whole.truncated
    payload, headers = client.dlq_text(d.dead_id)
    assert payload == whole.payload_text and headers == whole.headers_text and '"h"' in (headers or "")
    (one,) = client.dlq_search("q", preview_chars=1)
    assert one.payload_text == "{"


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"limit": 0}, InvalidArgument), ({"limit": 1001}, InvalidArgument), ({"limit": None}, InvalidArgument),
    ({"limit": INT4}, InvalidArgument), ({"limit": True}, InvalidArgument),
    ({"preview_chars": 0}, InvalidArgument), ({"preview_chars": 1_000_001}, InvalidArgument),
    ({"preview_chars": INT4}, InvalidArgument),
    ({"search": "x" * 201}, InvalidArgument), ({"older_than": timedelta(seconds=-1)}, InvalidArgument),
    ({"before": 2**63}, InvalidArgument), ({"msg_id": "1"}, InvalidArgument),
])
def test_dlq_search_refuses_bad_arguments(client: pglogq.Client, kwargs: dict[str, object],
                                          error: type[Exception]) -> None:
    client.create_queue("q")  # no dead letter: the checks run all the same
    with pytest.raises(error):
        client.dlq_search("q", **kwargs)  # type: ignore[arg-type]


def test_checks_run_without_dead_letters(client: pglogq.Client) -> None:
    """dlq_search and dlq_inspect check their filters on a queue with no dead letter at all (the
    plan of their join used to skip _dead_letters, which checks, and answer with no row)."""
    client.create_queue("q")
    for call in (client.dlq_search, client.dlq_inspect):
        with pytest.raises(UnknownQueue):
            call("nope")
        with pytest.raises(UnknownConsumer):
            call("q", "nobody")
        with pytest.raises(InvalidArgument):
            call("q", older_than=timedelta(seconds=-1))


def test_dlq_search_boundaries_that_are_allowed(client: pglogq.Client, two_queues: dict[str, list[int]]) -> None:
    assert len(client.dlq_search("a", limit=1)) == 1
    assert len(client.dlq_search("a", limit=1000)) == 7
    assert len(client.dlq_search("a", search="x" * 200)) == 0
    assert len(client.dlq_search("a", before=INT8_MAX)) == 7
    assert client.dlq_search("a", before=0) == [] and client.dlq_search("a", before=-1) == []
    assert client.dlq_search("a", msg_id=0) == [] and client.dlq_search("a", msg_id=INT8_MAX) == []
    assert len(client.dlq_search("a", preview_chars=1_000_000)) == 7


def test_unknown_queue_consumer_dead_letter(client: pglogq.Client, two_queues: dict[str, list[int]]) -> None:
    with pytest.raises(UnknownQueue):
        client.dlq_search("nope")
    with pytest.raises(UnknownConsumer):
        client.dlq_search("a", "nobody")
    with pytest.raises(UnknownQueue):
        client.stored_events("nope")
    for bad in (0, -1, INT8_MAX):
        with pytest.raises(UnknownDeadLetter):
            client.dlq_text(bad)
    with pytest.raises(UnknownDeadLetter):
        client.dlq_text(2**63)


def test_dlq_text_of_a_replayed_dead_letter(client: pglogq.Client, two_queues: dict[str, list[int]]) -> None:
    d = client.dlq_search("a", limit=1)[0]
    client.dlq_replay(d.dead_id)
    with pytest.raises(UnknownDeadLetter):
        client.dlq_text(d.dead_id)


def test_sql_nulls(dsn: str, client: pglogq.Client, two_queues: dict[str, list[int]]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for sql, code in [
            ("SELECT * FROM pglogq.dlq_search(NULL)", "PQ004"),
            ("SELECT * FROM pglogq.dlq_search('a', max_rows => NULL)", "PQ019"),
            ("SELECT * FROM pglogq.dlq_text(NULL)", "PQ012"),
        ]:
            with pytest.raises(psycopg.Error) as exc:
                conn.execute(sql)
            assert exc.value.sqlstate in (code, "PQ001"), (sql, exc.value.sqlstate)
        n = conn.execute("SELECT count(*) FROM pglogq.dlq_search('a', NULL, NULL, NULL, NULL, NULL, NULL)").fetchone()
        assert n == (7,)


def test_ticker_holder_and_last_run(dsn: str, client: pglogq.Client) -> None:
    assert client.ticker_holder() is None and client.ticker_last_run() is None
    with pglogq.start_ticker(dsn):
        holder = wait_for(client.ticker_holder, "the ticker's lock")
        assert holder.pid > 0 and "pglogq" in (holder.application_name or "")
        wait_for(client.ticker_last_run, "a ticker check")
    wait_for(lambda: client.ticker_holder() is None, "the lock released")


def test_grants(dsn: str, client: pglogq.Client, two_queues: dict[str, list[int]]) -> None:
    """dlq_search and dlq_text are admin's (they show payloads); ticker_holder is monitoring."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role in ("pglogq_reader", "pglogq_writer"):
            conn.execute(f"SET ROLE {role}")
            assert conn.execute("SELECT count(*) FROM pglogq.ticker_holder()").fetchone() == (0,)
            for sql in ("SELECT * FROM pglogq.dlq_search('a')", "SELECT * FROM pglogq.dlq_text(1)"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql)
            conn.execute("RESET ROLE")
