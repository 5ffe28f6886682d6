"""Bad arguments to the Python client get pglogq's errors, checked before any SQL (the contract
attacks of docs/reliability/attacks-pyclient.md), on Client and AsyncClient.

Integers are checked against their SQL types (int4 / int8): a value the server cannot even be
asked about raises the class the server gives for such a value (an unknown batch, an invalid
argument), never psycopg's UndefinedFunction.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

import pglogq
from tests.support.db import closed_everything

BIG = [2**31, 2**40, 2**63, 2**70, -(2**63) - 1]


@pytest.fixture
def ready(api: Any) -> Any:
    api.create_queue("q")
    api.subscribe("q", "c")
    return api


def make_message(**over: Any) -> pglogq.Message:
    base: dict[str, Any] = dict(batch_id=1, msg_id=1, type=None, payload={}, headers=None, retry_count=0,
                                created_at=datetime.now().astimezone(), priority=100, txid="1")
    base.update(over)
    return pglogq.Message(**base)


CASES: list[tuple[str, Callable[[Any, int], Any], type[Exception]]] = [
    ("receive max_messages", lambda a, n: a.receive("q", "c", max_messages=n), pglogq.InvalidArgument),
    ("ack", lambda a, n: a.ack(n), pglogq.UnknownBatch),
    ("heartbeat", lambda a, n: a.heartbeat(n), pglogq.UnknownBatch),
    ("report_progress batch", lambda a, n: a.report_progress(n, 1), pglogq.UnknownBatch),
    ("report_progress msg", lambda a, n: a.report_progress(1, n), (pglogq.UnknownBatch, pglogq.MessageNotInBatch)),
    ("nack batch", lambda a, n: a.nack(make_message(batch_id=n)), pglogq.UnknownBatch),
    ("cancel", lambda a, n: a.cancel("q", n), pglogq.UnknownMessage),
    ("dlq_replay", lambda a, n: a.dlq_replay(n), pglogq.UnknownDeadLetter),
    ("dlq_inspect limit", lambda a, n: a.dlq_inspect("q", limit=n), pglogq.InvalidArgument),
    ("send priority", lambda a, n: a.send("q", {}, priority=n), pglogq.InvalidArgument),
    ("send_batch priority", lambda a, n: a.send_batch("q", [{}], priority=n), pglogq.InvalidArgument),
    ("seek by_events", lambda a, n: a.seek_plan("q", "c", by_events=n), pglogq.SeekOutOfRange),
    ("seek to tick", lambda a, n: a.seek("q", "c", to=n), pglogq.SeekOutOfRange),
]


@pytest.mark.parametrize("what, call, error", CASES, ids=[c[0] for c in CASES])
def test_integers_beyond_the_sql_type_raise_the_servers_error_class(
    ready: Any, what: str, call: Callable[[Any, int], Any], error: Any
) -> None:
    """Regression: receive(max_messages=2**40) and ack(2**70) raised psycopg UndefinedFunction."""
    int4 = error is pglogq.InvalidArgument
    for n in BIG:
        if not int4 and -(2**63) <= n < 2**63:
            continue  # within int8: the server answers itself
        with pytest.raises(error):
            call(ready, n)


@pytest.mark.parametrize("what, call, error", CASES, ids=[c[0] for c in CASES])
def test_bool_float_and_str_where_an_integer_is_expected_are_invalid_argument(
    ready: Any, what: str, call: Callable[[Any, int], Any], error: Any
) -> None:
    for bad in (True, False, 1.0, "1"):
        if what == "seek to tick" and bad == "1":
            continue  # a str is a position ('earliest', a tick id, a time)
        with pytest.raises(pglogq.InvalidArgument):
            call(ready, bad)


def test_nothing_was_changed_by_refused_calls(ready: Any) -> None:
    with pytest.raises(pglogq.InvalidArgument):
        ready.send("q", {}, priority=2**31)
    with pytest.raises(pglogq.InvalidArgument):
        ready.send("q", {}, priority=True)
    assert ready.queue_info("q")[0].pending_estimate == 0  # no id was even taken


@pytest.mark.parametrize("bad", [123, b"q", ["q"], "q\x00x"])
def test_names_that_are_not_text_are_invalid_name(ready: Any, bad: Any) -> None:
    for call in (
        lambda: ready.create_queue(bad), lambda: ready.subscribe("q", bad), lambda: ready.send(bad, {}),
        lambda: ready.receive("q", bad), lambda: ready.receive(bad, "c"), lambda: ready.drop_queue(bad),
        lambda: ready.queue_info(bad), lambda: ready.consumer_info("q", bad), lambda: ready.in_flight(bad),
        lambda: ready.receive("q", "c", worker=bad), lambda: ready.dlq_inspect(bad),
    ):
        with pytest.raises(pglogq.InvalidName):
            call()


def test_text_with_nul_and_wrong_types_elsewhere(ready: Any) -> None:
    with pytest.raises(pglogq.InvalidPayload):
        ready.send("q", {}, type="a\x00b")
    with pytest.raises(pglogq.InvalidPayload):
        ready.send("q", {}, type=5)
    with pytest.raises(pglogq.InvalidArgument):
        ready.send("q", {}, idempotency_key="k\x00")
    with pytest.raises(pglogq.InvalidArgument):
        ready.send_batch("q", [{}, {}], idempotency_keys="ab")  # a str is not a list of keys
    with pytest.raises(pglogq.InvalidDelay):
        ready.send("q", {}, delay=5)
    with pytest.raises(pglogq.InvalidDelay):
        ready.send("q", {}, deliver_at=datetime(2030, 1, 1))  # naive: depends on the session TimeZone
    with pytest.raises(pglogq.InvalidArgument):
        ready.seek_plan("q", "c", to=datetime(2030, 1, 1))
    with pytest.raises(pglogq.InvalidArgument):
        ready.seek_plan("q", "c", to=True)  # was tick 1
    with pytest.raises(pglogq.InvalidArgument):
        ready.drop_queue("q", force=1)
    with pytest.raises(pglogq.InvalidArgument):
        ready.dlq_inspect("q", older_than=3600)
    with pytest.raises(pglogq.InvalidConfig):
        ready.set_queue_config("q", "max_retries\x00", 3)
    with pytest.raises(pglogq.InvalidProgress):
        ready.report_progress(1, 1, percent=True)
    with pytest.raises(pglogq.InvalidProgress):
        ready.report_progress(1, 1, counters={"x": float("nan")})
    with pytest.raises(pglogq.InvalidArgument):
        ready.nack("not a message")
    with pytest.raises(pglogq.InvalidDelay):
        ready.nack(make_message(), retry_after=10)
    assert ready.queue_info("q")[0].pending_estimate == 0  # no id was even taken


def test_a_closed_client_refuses_calls(dsn: str) -> None:
    client = pglogq.Client(dsn)
    client.create_queue("q")
    client.close()
    with pytest.raises(pglogq.ClientClosed):
        client.create_queue("q2")
    client.close()  # twice is fine

    async def main() -> None:
        ac = pglogq.AsyncClient(dsn)
        await ac.create_queue("q3")
        await ac.close()
        with pytest.raises(pglogq.ClientClosed):
            await ac.queue_info()

    asyncio.run(main())


def test_one_client_shared_by_threads_opens_one_pool(dsn: str) -> None:
    """Calls from many threads at once on a fresh client: one pool, every call answered."""
    client = pglogq.Client(dsn, max_size=4)
    client_pools: set[int] = set()
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            start.wait()
            client.create_queue(f"q{i}")
            client_pools.add(id(client._pool))
            for _ in range(20):
                client.send(f"q{i}", {"i": i})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    assert errors == [] and len(client_pools) == 1
    closed_everything(dsn)


def test_retry_after_timedelta_is_still_accepted(ready: Any) -> None:
    ready.send("q", {})
    ready.tick("q", force=True)
    page = ready.receive("q", "c")
    [msg] = list(page)
    assert page.nack(msg, retry_after=timedelta(seconds=1)) == "retry"
    assert page.ack() is True
