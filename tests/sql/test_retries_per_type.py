"""Retries per queue and per event type (max_retries 0, set_type_config, RetryPolicy).

Real server; a consumer process-less run (Consumer.run) shows that a handler's declared policy is
the one its nacks use."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq import RetryPolicy
from tests.support.draining import drain


def retry_rows(dsn: str) -> dict[int, tuple[float, int]]:
    """msg_id -> (seconds until due, retry_count) of every pending retry."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT msg_id, extract(epoch FROM due_at - clock_timestamp())::float8, retry_count FROM pglogq.retry"
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def type_rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT * FROM pglogq.type_config ORDER BY ev_type").fetchall()


def nack_all(client: pglogq.Client, queue: str, consumer: str, **kw: Any) -> dict[int, str]:
    client.tick(queue, force=True)
    batch = client.receive(queue, consumer)
    verdicts = {m.msg_id: client.nack(m, reason="boom", **kw) for m in batch}
    batch.ack()
    return verdicts


def test_queue_max_retries_zero_dead_letters_the_first_nack(client: pglogq.Client) -> None:
    """max_retries 0 was refused (PQ005); the seeds recommend one attempt for payments."""
    client.create_queue("q")
    client.subscribe("q", "a")
    assert client.set_queue_config("q", "max_retries", 0) == "0"
    m = client.send("q", {"pay": 1})
    assert nack_all(client, "q", "a") == {m: "dead"}
    [dead] = client.dlq_inspect("q")
    assert (dead.msg_id, dead.retry_count, dead.reason) == (m, 0, "boom")
    with pytest.raises(pglogq.InvalidConfig):
        client.set_queue_config("q", "max_retries", -1)


def test_type_max_retries_overrides_the_queue(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    assert client.set_type_config("q", "payment", "max_retries", 0) == "0"
    pay = client.send("q", {"n": 1}, type="payment")
    mail = client.send("q", {"n": 2}, type="mail")
    plain = client.send("q", {"n": 3})
    assert nack_all(client, "q", "a") == {pay: "dead", mail: "retry", plain: "retry"}
    # the override of another type, or of the same type in another queue, changes nothing
    client.create_queue("other")
    client.set_type_config("other", "mail", "max_retries", 0)
    assert set(retry_rows(dsn)) == {mail, plain}


def test_type_retry_policy_sets_the_wait_of_each_redelivery(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    client.set_queue_config("q", "retry_delay", "1 second")
    policy = RetryPolicy.exponential(timedelta(seconds=100), factor=2, cap=timedelta(seconds=350), jitter=False)
    client.set_type_config("q", "report", "retry_policy", policy)
    [cfg] = client.type_config("q")
    assert (cfg.type, cfg.retry_delay, cfg.retry_factor, cfg.retry_cap, cfg.retry_jitter, cfg.max_retries) == (
        "report", timedelta(seconds=100), 2.0, timedelta(seconds=350), False, None)
    with psycopg.connect(dsn) as conn:
        waits = [conn.execute("SELECT extract(epoch FROM delay)::float8 FROM pglogq._retry_rule("
                              "(SELECT q FROM pglogq.queue q WHERE queue_name = 'q'), 'report', %s)", (n,)).fetchone()
                 for n in range(4)]
    assert [w[0] for w in waits if w] == [policy.delay(n).total_seconds() for n in range(4)] == [100, 200, 350, 350]
    r = client.send("q", {}, type="report")
    other = client.send("q", {}, type="mail")
    nack_all(client, "q", "a")
    due = retry_rows(dsn)
    assert 95 < due[r][0] <= 100 and due[other][0] <= 1
    # a retry_after given to nack wins over the type's policy
    client.set_queue_config("q", "retry_delay", "0")
    r2 = client.send("q", {}, type="report")
    nack_all(client, "q", "a", retry_after=timedelta(hours=2))
    assert 7100 < retry_rows(dsn)[r2][0] <= 7200
    # None removes the overrides: the row goes
    assert client.set_type_config("q", "report", "retry_policy", None) is None
    assert client.type_config("q") == [] and type_rows(dsn) == []


def test_jittered_type_policy_stays_within_half_and_full(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.set_type_config("q", "t", "retry_delay", timedelta(seconds=60))
    client.set_type_config("q", "t", "retry_jitter", True)
    with psycopg.connect(dsn) as conn:
        got = [r[0] for r in conn.execute(
            "SELECT extract(epoch FROM (pglogq._retry_rule(q, 't', 0)).delay)::float8"
            "  FROM pglogq.queue q, generate_series(1, 200)").fetchall()]
    assert all(30 <= g <= 60 for g in got) and len(set(got)) > 100


@pytest.mark.parametrize(
    ("type_", "param", "value"),
    [
        ("t", "max_retry", "1"),            # unknown parameter
        ("t", "max_retries", "-1"),
        ("t", "max_retries", "2147483648"),
        ("t", "max_retries", "x"),
        ("t", "retry_delay", "-1 s"),
        ("t", "retry_delay", "367 days"),
        ("t", "retry_cap", "soon"),
        ("t", "retry_factor", "0.5"),
        ("t", "retry_factor", "NaN"),
        ("t", "retry_factor", "1001"),
        ("t", "retry_jitter", "maybe"),
        ("", "max_retries", "1"),           # empty type
        ("x" * 256, "max_retries", "1"),    # type too long
    ],
)
def test_bad_type_config_is_refused_and_changes_nothing(
    client: pglogq.Client, dsn: str, type_: str, param: str, value: str
) -> None:
    client.create_queue("q")
    client.set_type_config("q", "t", "max_retries", 3)
    before = type_rows(dsn)
    with pytest.raises(pglogq.InvalidTypeConfig) as exc:
        client.set_type_config("q", type_, param, value)
    assert exc.value.sqlstate == "PQ065"
    assert type_rows(dsn) == before


def test_bad_type_config_from_sql_and_unknown_queue(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    with psycopg.connect(dsn) as conn:
        with pytest.raises(psycopg.Error) as exc:
            conn.execute("SELECT pglogq.set_type_config('q', NULL, 'max_retries', '1')")
        assert exc.value.sqlstate == "PQ065"
    with pytest.raises(pglogq.UnknownQueue):
        client.set_type_config("nope", "t", "max_retries", 1)
    with pytest.raises(pglogq.InvalidTypeConfig):
        client.set_type_config("q", "t", "retry_policy", "fast")
    assert type_rows(dsn) == []


def test_handler_retry_policy_wins_over_the_consumer_and_the_server(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    client.set_type_config("q", "report", "retry_delay", timedelta(minutes=30))
    pay = client.send("q", {}, type="payment")
    report = client.send("q", {}, type="report")
    other = client.send("q", {}, type="mail")
    client.tick("q", force=True)
    consumer = pglogq.Consumer(client, "q", "a", retry_policy=RetryPolicy.fixed(timedelta(minutes=5)))

    @consumer.handler("payment", retry_policy=RetryPolicy.fixed(timedelta(hours=3)))
    def on_payment(msg: pglogq.Delivery) -> None:
        raise RuntimeError("card declined")

    @consumer.handler("report")
    def on_report(msg: pglogq.Delivery) -> None:
        raise RuntimeError("no data")

    @consumer.handler()
    def other_types(msg: pglogq.Delivery) -> None:
        raise RuntimeError("later")

    consumer.run(stop_when_idle=True)
    due = retry_rows(dsn)
    assert 3 * 3600 - 60 < due[pay][0] <= 3 * 3600      # the handler's policy
    assert 5 * 60 - 60 < due[report][0] <= 5 * 60        # the consumer's wins over the server's
    assert 5 * 60 - 60 < due[other][0] <= 5 * 60


def test_without_a_policy_in_code_the_server_type_policy_applies(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    client.set_type_config("q", "report", "retry_delay", timedelta(minutes=30))
    client.set_type_config("q", "payment", "max_retries", 0)
    report = client.send("q", {}, type="report")
    pay = client.send("q", {}, type="payment")
    client.tick("q", force=True)
    consumer = pglogq.Consumer(client, "q", "a")

    @consumer.handler()
    def fail(msg: pglogq.Delivery) -> None:
        raise RuntimeError("no")

    stats = consumer.run(stop_when_idle=True)
    assert (stats.retried, stats.dead) == (1, 1)
    assert 29 * 60 < retry_rows(dsn)[report][0] <= 30 * 60
    assert [d.msg_id for d in client.dlq_inspect("q")] == [pay]
    assert drain(client, "q", "a") == []


def test_handler_retry_policy_must_be_a_policy(client: pglogq.Client) -> None:
    consumer = pglogq.Consumer(client, "q", "a")
    with pytest.raises(TypeError):
        consumer.handler("t", retry_policy=5)  # type: ignore[arg-type]
