"""pglogq.contrib.django against real Django on a fresh test database.

Django is configured once for this module (``settings.configure``) with the database made by
the ``django_dsn`` fixture; the application's SQL and ``send`` go through Django's connection.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import django
import psycopg
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction
from psycopg.conninfo import conninfo_to_dict

import pglogq
from tests.support.db import with_db

_counter = iter(range(1_000_000))


@pytest.fixture(scope="module")
def django_dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    """A fresh database (schema installed) that Django's default connection uses."""
    name = f"pglogq_django_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    dsn = with_db(server_dsn, name)
    p = conninfo_to_dict(dsn)
    db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name, "USER": p.get("user", ""), "PASSWORD": p.get("password", ""),
        "HOST": p.get("host", ""), "PORT": p.get("port", ""),
    }
    assert not settings.configured, "Django settings are configured once per process: only this module may"
    lite = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    settings.configure(DATABASES={"default": db, "lite": lite}, INSTALLED_APPS=["pglogq.contrib.django"], USE_TZ=True)
    django.setup()
    yield dsn
    connections.close_all()
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def queue(django_dsn: str) -> Iterator[str]:
    """A new queue with the consumer 'mailer', and the application's table."""
    name = f"dj_{next(_counter)}"
    with pglogq.Client(django_dsn) as c:
        c.create_queue(name)
        c.subscribe(name, "mailer")
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS shop_order (id int PRIMARY KEY, total int NOT NULL)")
    yield name


def delivered(dsn: str, queue: str) -> list[Any]:
    with pglogq.Client(dsn) as c:
        c.tick(queue, force=True)
        batch = c.receive(queue, "mailer")
        batch.ack()
        return [m.payload for m in batch]


def place_order(queue: str, order_id: int, total: int, *, key: str | None = None) -> int:
    """A request handler: the order and its event in one transaction of Django's connection."""
    from pglogq.contrib.django import send

    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("INSERT INTO shop_order VALUES (%s, %s) ON CONFLICT (id) DO NOTHING", [order_id, total])
        msg_id = send(queue, {"order_id": order_id}, type="order.created", idempotency_key=key)
        if total < 0:
            raise ValueError("negative total")
        return msg_id


def test_commit_delivers(django_dsn: str, queue: str) -> None:
    msg_id = place_order(queue, 101, 25)
    with pglogq.Client(django_dsn) as c:
        c.tick(queue, force=True)
        [m] = c.receive(queue, "mailer")
    assert (m.msg_id, m.payload, m.type) == (msg_id, {"order_id": 101}, "order.created")


def test_rollback_drops_the_event(django_dsn: str, queue: str) -> None:
    with pytest.raises(ValueError, match="negative total"):
        place_order(queue, 102, -1)
    assert delivered(django_dsn, queue) == []
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM shop_order WHERE id = 102")
        assert cur.fetchone() == (0,)


def test_savepoint_rollback_drops_only_its_event(django_dsn: str, queue: str) -> None:
    from pglogq.contrib.django import send

    with transaction.atomic():
        send(queue, {"n": 1})
        try:
            with transaction.atomic():
                send(queue, {"n": 2})
                raise RuntimeError("inner")
        except RuntimeError:
            pass
        send(queue, {"n": 3})
    assert delivered(django_dsn, queue) == [{"n": 1}, {"n": 3}]


def test_idempotency_key_dedupes_a_retried_request(django_dsn: str, queue: str) -> None:
    first = place_order(queue, 103, 40, key="order-103")
    retried = place_order(queue, 103, 40, key="order-103")  # the client timed out and sent it again
    assert retried == first
    assert delivered(django_dsn, queue) == [{"order_id": 103}]


def test_send_batch_in_the_transaction(django_dsn: str, queue: str) -> None:
    from pglogq.contrib.django import send_batch

    with transaction.atomic():
        ids = send_batch(queue, [{"n": 1}, {"n": 2}], type="t", idempotency_keys=["a", None])
    with pytest.raises(RuntimeError), transaction.atomic():
        send_batch(queue, [{"n": 3}])
        raise RuntimeError("rolled back")
    with transaction.atomic():
        again = send_batch(queue, [{"n": 4}, {"n": 5}], idempotency_keys=["a", "b"])
    assert again[0] == ids[0] and again[1] not in ids
    assert delivered(django_dsn, queue) == [{"n": 1}, {"n": 2}, {"n": 5}]


def test_errors_are_pglogq_errors_and_roll_back(django_dsn: str, queue: str) -> None:
    from pglogq.contrib.django import send, send_batch

    with pytest.raises(pglogq.UnknownQueue, match="no_such_queue"), transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("INSERT INTO shop_order VALUES (104, 1)")
        send("no_such_queue", {"n": 1})
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM shop_order WHERE id = 104")
        assert cur.fetchone() == (0,)
    # bad input is refused before any SQL, the same way the Client refuses it
    with transaction.atomic():
        for call, exc in [
            (lambda: send(queue, {"x": float("nan")}), pglogq.InvalidPayload),
            (lambda: send(queue, 1, priority=2**31), pglogq.InvalidArgument),
            (lambda: send(queue, 1, delay=5), pglogq.InvalidDelay),  # type: ignore[arg-type]
            (lambda: send(123, 1), pglogq.InvalidName),  # type: ignore[arg-type]
            (lambda: send_batch(queue, "abc"), pglogq.InvalidPayload),
            (lambda: send_batch(queue, [1], idempotency_keys="k"), pglogq.InvalidArgument),
        ]:
            with pytest.raises(exc):
                call()
        send(queue, {"ok": True})  # the transaction is still usable
    with pytest.raises(pglogq.InvalidPayload), transaction.atomic():
        send(queue, {"n": 1}, headers=["not", "an", "object"])  # type: ignore[arg-type]
    assert delivered(django_dsn, queue) == [{"ok": True}]


def test_settings(django_dsn: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from pglogq.contrib import django as dj

    assert conninfo_to_dict(dj.dsn())["dbname"] == conninfo_to_dict(django_dsn)["dbname"]
    with psycopg.connect(dj.dsn()) as conn:  # the derived DSN connects
        assert conn.execute("SELECT current_database()").fetchone() == (conninfo_to_dict(django_dsn)["dbname"],)
    monkeypatch.setattr(settings, "PGLOGQ", {"DSN": "postgresql:///elsewhere"}, raising=False)
    assert dj.dsn() == "postgresql:///elsewhere"
    monkeypatch.setattr(settings, "PGLOGQ", {"DNS": "typo"}, raising=False)
    with pytest.raises(ImproperlyConfigured, match="DNS"):
        dj.dsn()
    monkeypatch.setattr(settings, "PGLOGQ", {"DATABASE": "nope"}, raising=False)
    with pytest.raises(ImproperlyConfigured, match="nope"):
        dj.send(queue, 1)
    monkeypatch.setattr(settings, "PGLOGQ", ["DSN"], raising=False)
    with pytest.raises(ImproperlyConfigured, match="dict"):
        dj.send(queue, 1)
    monkeypatch.setattr(settings, "PGLOGQ", {}, raising=False)
    with pytest.raises(ImproperlyConfigured, match="sqlite"):
        dj.send(queue, 1, using="lite")
    with pytest.raises(ImproperlyConfigured, match="sqlite"):
        dj.dsn("lite")


def test_options_through_djangos_binding(django_dsn: str, queue: str) -> None:
    """delay, deliver_at, priority, headers, a non-ASCII payload: adapted by Django's cursor."""
    from pglogq.contrib.django import send, send_batch

    now = datetime.now(timezone.utc)
    with transaction.atomic():
        send(queue, {"n": "later"}, delay=timedelta(hours=1))
        send(queue, {"n": "tomorrow"}, deliver_at=now + timedelta(days=1))
        send_batch(queue, [{"n": "b"}], delay=timedelta(hours=1), headers={"a": 1}, priority=32767)
        send(queue, {"n": "now ✓"}, deliver_at=now - timedelta(hours=1), priority=0, type="t", headers={"h": "é"})
    with pglogq.Client(django_dsn) as c:
        c.tick(queue, force=True)
        [m] = c.receive(queue, "mailer")
        [info] = c.queue_info(queue)
    assert (m.payload, m.type, m.priority, m.headers) == ({"n": "now ✓"}, "t", 0, {"h": "é"})
    assert info.delayed == 3


def test_send_carries_the_trace(django_dsn: str, queue: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from pglogq import _trace
    from pglogq.contrib import otel
    from pglogq.contrib.django import send

    provider = TracerProvider()
    otel.instrument(provider)
    try:
        with provider.get_tracer("t").start_as_current_span("POST /orders") as span, transaction.atomic():
            send(queue, {"n": 1})
    finally:
        _trace.tracer = None
    with pglogq.Client(django_dsn) as c:
        c.tick(queue, force=True)
        [m] = c.receive(queue, "mailer")
    assert m.headers is not None
    assert m.headers["traceparent"].split("-")[1] == format(span.get_span_context().trace_id, "032x")


def test_management_commands(django_dsn: str, queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pglogq.contrib.django import send

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PGLOGQ_DSN", "postgresql:///unused")  # the command sets it (restored after)
    (tmp_path / "shop_consumers.py").write_text(textwrap.dedent(f"""
        import pglogq
        from pathlib import Path

        consumer = pglogq.Consumer(None, {queue!r}, "mailer")

        @consumer.handler()
        def mail(msg):
            with Path("handled.txt").open("a") as f:
                f.write(f"{{msg.payload['n']}}\\n")
    """))
    with transaction.atomic():
        send(queue, {"n": 1})
        send(queue, {"n": 2})
    call_command("pglogq_ticker", "--once", "--log-level", "ERROR")  # ticks every queue once
    call_command("pglogq_worker", "shop_consumers:consumer", "--stop-when-idle", "--log-level", "WARNING")
    assert (tmp_path / "handled.txt").read_text().split() == ["1", "2"]
    assert delivered(django_dsn, queue) == []  # the worker acknowledged them
    with pytest.raises(CommandError, match="no_such_module"):
        call_command("pglogq_worker", "no_such_module:consumer")
