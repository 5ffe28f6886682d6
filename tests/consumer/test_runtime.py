"""The consumer contract, run on both Consumer (threads) and AsyncConsumer (asyncio)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import MODES, Spec, run_once, running

pytestmark = pytest.mark.parametrize("mode", MODES)


def setup_queue(client: pglogq.Client, queue: str = "q", consumer: str = "c", **config: Any) -> None:
    client.create_queue(queue)
    client.subscribe(queue, consumer)
    for key, value in config.items():
        client.set_queue_config(queue, key, value)


def test_handlers_are_routed_by_type(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    client.send_batch("q", [{"n": 1}, {"n": 2}], type="order.created")
    client.send("q", {"n": 3}, type="order.paid")
    client.send("q", {"n": 4}, type="other")
    client.send("q", {"n": 5})  # no type: the default handler
    client.send_batch("q", [{"n": 6}, {"n": 7}, {"n": 8}], type="bulk")
    client.tick("q", force=True)
    seen: dict[str, list[Any]] = {"created": [], "paid": [], "default": [], "bulk": []}
    spec = Spec(dsn, "q", "c")

    @spec.handler("order.created")
    def created(msg: Any) -> None:
        seen["created"].append(msg.payload["n"])

    @spec.handler("order.paid")
    def paid(msg: Any) -> None:
        seen["paid"].append(msg.payload["n"])

    @spec.handler()
    def default(msg: Any) -> None:
        seen["default"].append((msg.type, msg.payload["n"]))

    @spec.batch_handler("bulk")
    def bulk(msgs: list[Any]) -> None:
        seen["bulk"].append([m.payload["n"] for m in msgs])

    stats = run_once(mode, spec, stop_when_idle=True)
    assert seen == {"created": [1, 2], "paid": [3], "default": [("other", 4), (None, 5)], "bulk": [[6, 7, 8]]}
    assert (stats.pages, stats.handled, stats.failed) == (1, 8, 0)
    assert len(client.receive("q", "c")) == 0  # acknowledged


def test_failing_handler_is_retried_then_dead_lettered(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, max_retries=2)
    ok_id = client.send("q", {"ok": True}, type="job")
    bad_id = client.send("q", {"ok": False}, type="job")
    client.tick("q", force=True)
    attempts: list[tuple[int, int]] = []
    spec = Spec(dsn, "q", "c", kwargs={"retry_policy": pglogq.RetryPolicy.fixed(timedelta(0))})

    @spec.handler("job")
    def job(msg: Any) -> None:
        attempts.append((msg.msg_id, msg.retry_count))
        if not msg.payload["ok"]:
            raise ValueError(f"cannot do job {msg.msg_id}")

    totals = pglogq.RunStats()
    for _ in range(10):
        stats = run_once(mode, spec, stop_when_idle=True)
        totals.retried += stats.retried
        totals.dead += stats.dead
        totals.handled += stats.handled
        if client.dlq_inspect("q"):
            break
        client.maintain()  # the pump brings due retries back
        client.tick("q", force=True)
    assert attempts == [(ok_id, 0), (bad_id, 0), (bad_id, 1), (bad_id, 2)]
    assert (totals.handled, totals.retried, totals.dead) == (1, 2, 1)
    [dead] = client.dlq_inspect("q")
    assert dead.msg_id == bad_id and dead.retry_count == 2
    assert dead.reason is not None and f"ValueError: cannot do job {bad_id}" in dead.reason


def test_message_without_handler_is_nacked(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    client.send("q", {}, type="known")
    unknown = client.send("q", {}, type="unknown")
    client.tick("q", force=True)
    spec = Spec(dsn, "q", "c")
    spec.handler("known")(lambda msg: None)
    stats = run_once(mode, spec, stop_when_idle=True)
    assert (stats.handled, stats.failed, stats.retried) == (1, 1, 1)
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT msg_id, reason FROM pglogq.retry").fetchone()
    assert row is not None and row[0] == unknown and "no handler for event type 'unknown'" in row[1]


def test_batch_handler_failure_nacks_all_its_messages(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    ids = client.send_batch("q", [{"n": i} for i in range(3)], type="bulk")
    single = client.send("q", {"n": 9}, type="single")
    client.tick("q", force=True)
    spec = Spec(dsn, "q", "c")
    spec.handler("single")(lambda msg: None)

    @spec.batch_handler("bulk")
    def bulk(msgs: list[Any]) -> None:
        raise RuntimeError("the whole lot failed")

    stats = run_once(mode, spec, stop_when_idle=True)
    assert (stats.handled, stats.failed) == (1, 3)
    with psycopg.connect(dsn) as conn:
        retried = [r[0] for r in conn.execute("SELECT msg_id FROM pglogq.retry ORDER BY msg_id")]
    assert retried == ids and single not in retried


def test_message_timeout_nacks_with_a_reason(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    slow = client.send("q", {"sleep": 30}, type="t")
    fast = client.send("q", {"sleep": 0}, type="t")
    client.tick("q", force=True)
    release = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"message_timeout": 0.5, "concurrency": 2})

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        if mode == "thread":
            release.wait(msg.payload["sleep"])
            return None
        import asyncio

        return asyncio.sleep(msg.payload["sleep"])

    stats = run_once(mode, spec, stop_when_idle=True)
    release.set()
    assert (stats.handled, stats.failed, stats.timed_out) == (1, 1, 1)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT msg_id, reason FROM pglogq.retry").fetchall()
    assert rows == [(slow, "timed out after 0.5 s")] and fast != slow


def test_concurrency_is_bounded(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    client.send_batch("q", [{"n": i} for i in range(12)], type="t")
    client.tick("q", force=True)
    lock = threading.Lock()
    now = {"running": 0, "max": 0}
    spec = Spec(dsn, "q", "c", kwargs={"concurrency": 3})

    def enter() -> None:
        with lock:
            now["running"] += 1
            now["max"] = max(now["max"], now["running"])

    def leave() -> None:
        with lock:
            now["running"] -= 1

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        if mode == "thread":
            enter()
            time.sleep(0.1)
            leave()
            return None
        import asyncio

        async def work() -> None:
            enter()
            await asyncio.sleep(0.1)
            leave()

        return work()

    stats = run_once(mode, spec, stop_when_idle=True)
    assert stats.handled == 12
    assert 1 < now["max"] <= 3


def test_graceful_stop_finishes_and_acknowledges_the_page(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    client.send_batch("q", [{"n": i} for i in range(6)], type="t")
    client.tick("q", force=True)
    seen: list[int] = []
    holder: dict[str, Any] = {}
    spec = Spec(dsn, "q", "c")

    @spec.handler("t")
    def handle(msg: Any) -> None:
        seen.append(msg.payload["n"])
        if msg.payload["n"] == 1:
            holder["r"].stop()

    with running(mode, spec) as r:
        holder["r"] = r
        stats = r.join()
    assert seen == list(range(6))
    assert (stats.pages, stats.handled, stats.abandoned_pages) == (1, 6, 0)
    assert len(client.receive("q", "c")) == 0


def test_abandon_leaves_the_page_unacknowledged(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    ids = client.send_batch("q", [{"n": i} for i in range(6)], type="t")
    client.tick("q", force=True)
    seen: list[int] = []
    holder: dict[str, Any] = {}
    spec = Spec(dsn, "q", "c")

    @spec.handler("t")
    def handle(msg: Any) -> None:
        seen.append(msg.msg_id)
        if len(seen) == 2:
            holder["r"].stop(abandon=True)

    with running(mode, spec) as r:
        holder["r"] = r
        stats = r.join()
    assert (stats.pages, stats.handled, stats.abandoned_pages) == (0, 0, 1)
    assert seen[:2] == ids[:2] and len(seen) < len(ids)
    # nothing was acknowledged: the whole page comes back
    assert [m.msg_id for m in client.receive("q", "c")] == ids


def test_transactional_handlers_commit_with_the_ack(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE done (msg_id bigint PRIMARY KEY)")
    ids = client.send_batch("q", [{"n": i} for i in range(4)], type="t")
    client.tick("q", force=True)
    spec = Spec(dsn, "q", "c", kwargs={"transactional": True})

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        sql = "INSERT INTO done VALUES (%s)"
        if mode == "thread":
            msg.conn.execute(sql, (msg.msg_id,))
            if msg.payload["n"] == 2:
                raise RuntimeError("rolled back to its savepoint")
            return None

        async def work() -> None:
            await msg.conn.execute(sql, (msg.msg_id,))
            if msg.payload["n"] == 2:
                raise RuntimeError("rolled back to its savepoint")

        return work()

    stats = run_once(mode, spec, stop_when_idle=True)
    assert (stats.handled, stats.failed) == (3, 1)
    with psycopg.connect(dsn) as conn:
        done = [r[0] for r in conn.execute("SELECT msg_id FROM done ORDER BY 1")]
        retry = [r[0] for r in conn.execute("SELECT msg_id FROM pglogq.retry")]
    assert done == [ids[0], ids[1], ids[3]] and retry == [ids[2]]


def test_transactional_abandon_commits_nothing(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE done (msg_id bigint PRIMARY KEY)")
    ids = client.send_batch("q", [{"n": i} for i in range(4)], type="t")
    client.tick("q", force=True)
    holder: dict[str, Any] = {}
    spec = Spec(dsn, "q", "c", kwargs={"transactional": True})

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        sql = "INSERT INTO done VALUES (%s)"
        if msg.payload["n"] == 1:
            holder["r"].stop(abandon=True)
        if mode == "thread":
            msg.conn.execute(sql, (msg.msg_id,))
            return None
        return msg.conn.execute(sql, (msg.msg_id,))

    with running(mode, spec) as r:
        holder["r"] = r
        stats = r.join()
    assert stats.abandoned_pages == 1 and stats.pages == 0
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM done").fetchone()
    assert row is not None and row[0] == 0
    assert [m.msg_id for m in client.receive("q", "c")] == ids


def test_max_batches_and_paging(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    ids = client.send_batch("q", [{"n": i} for i in range(10)], type="t")
    client.tick("q", force=True)
    seen: list[int] = []
    spec = Spec(dsn, "q", "c", kwargs={"max_messages": 3})
    spec.handler()(lambda msg: seen.append(msg.msg_id))
    stats = run_once(mode, spec, max_batches=2)
    assert stats.pages == 2 and seen == ids[:6]
    stats = run_once(mode, spec, stop_when_idle=True)
    assert stats.pages == 2 and seen == ids


def test_tick_notification_wakes_a_waiting_consumer(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    got = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"poll_interval": 120})
    spec.handler()(lambda msg: got.set())
    with running(mode, spec) as r:
        time.sleep(0.5)  # the consumer is waiting now (an empty receive, then LISTEN)
        client.send("q", {"n": 1})
        client.tick("q", force=True)
        # polling alone would take 120 s: only the NOTIFY can wake it within the test's budget
        assert got.wait(60)
        r.stop()
        stats = r.join()
    assert stats.handled == 1
    assert r.consumer.health.notifications >= 1


def test_registration_errors(mode: str, dsn: str) -> None:
    cls = pglogq.Consumer if mode == "thread" else pglogq.AsyncConsumer
    c: Any = cls(dsn, "q", "c")

    def plain(msg: Any) -> None: ...

    async def coro(msg: Any) -> None: ...

    ok, wrong = (plain, coro) if mode == "thread" else (coro, plain)
    with pytest.raises(TypeError):
        c.handler("t")(wrong)
    c.handler("t")(ok)
    with pytest.raises(ValueError, match="registered already"):
        c.handler("t")(ok)
    c.handler()(ok)
    with pytest.raises(ValueError, match="default handler"):
        c.batch_handler()(ok)
    with pytest.raises(ValueError):
        cls(dsn, "q", "c", worker="bad name!")
    with pytest.raises(ValueError):
        cls(dsn, "q", "c", concurrency=0)
    with pytest.raises(ValueError):
        cls(dsn, "q", "c", transactional=True, concurrency=2)
    if mode == "thread":
        with pytest.raises(ValueError, match="cannot interrupt"):
            cls(dsn, "q", "c", transactional=True, message_timeout=1)
    auto = cls(dsn, "q", "c", worker="auto")
    assert auto.worker_name and auto.worker_name != cls(dsn, "q", "c", worker="auto").worker_name


def test_run_without_handler_or_subscription_fails(mode: str, client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    spec = Spec(dsn, "q", "nobody")
    with pytest.raises(RuntimeError, match="no handler"):
        run_once(mode, spec, stop_when_idle=True)
    spec.handler()(lambda msg: None)
    with pytest.raises(pglogq.UnknownConsumer):
        run_once(mode, spec, stop_when_idle=True)
