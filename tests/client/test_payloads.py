"""Payloads round-trip exactly between Python and jsonb, on Client and AsyncClient.

The rule (docs/reference/python.md, "Payload numbers"): a JSON integer decodes to ``int``; a
number with a fraction decodes to ``float`` when the float denotes exactly the number PostgreSQL
stored, else to ``decimal.Decimal``; a payload Python cannot decode is delivered with
``decode_error`` set instead of failing the whole receive.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.models import Undecodable
from tests.support.consumers import MODES, Spec, run_once


def setup(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")


def sql_send(dsn: str, payload_sql: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT pglogq.send('q', {payload_sql})").fetchone()
        assert row is not None
        return int(row[0])


def test_big_integers_and_floats_round_trip_exactly(api: Any) -> None:
    """Regression: 2**70 + 1 came back as 1.1805916207174113e+21, 10**400 made receive raise."""
    setup(api)
    payload = {
        "id": 2**70 + 1, "neg": -(2**64) - 3, "huge": 10**400, "i64": 2**63 - 1, "small": 12,
        "tenth": 0.1, "one": 1.0, "sum": 0.1 + 0.2, "tiny": 5e-324, "third": 1 / 3, "big": 1.7976931348623157e308,
        "e20": 1e20, "e16": -1e16, "text": "1e+16 stays text",
        "dec": Decimal("1.23456789012345678901234567890"), "list": [2**64, 1.5, "12345678901234567890"],
    }
    api.send("q", payload)
    api.tick("q", force=True)
    [msg] = list(api.receive("q", "c"))
    assert msg.decode_error is None
    got = msg.payload
    for key in ("id", "neg", "huge", "i64", "small"):
        assert type(got[key]) is int and got[key] == payload[key], key
    for key in ("tenth", "one", "sum", "tiny", "third", "big", "e20", "e16"):
        assert type(got[key]) is float and got[key] == payload[key], key
    assert got["text"] == payload["text"]
    assert got["dec"] == payload["dec"] and isinstance(got["dec"], Decimal)
    assert got["list"] == payload["list"]


def test_numbers_written_in_sql_decode_exactly_and_resend_unchanged(api: Any, dsn: str) -> None:
    """Regression: what jsonb accepts decodes without loss (1e400, 30 digits, 1e-400)."""
    setup(api)
    original = '{"a": 1e400, "b": 1.23456789012345678901234567890, "c": 1e-400, "d": 1.5, "e": -0.0, "f": 1e20}'
    sql_send(dsn, f"'{original}'::jsonb")
    api.tick("q", force=True)
    [msg] = list(api.receive("q", "c"))
    p = msg.payload
    assert p["a"] == 10**400 and type(p["a"]) is int
    assert p["b"] == Decimal("1.23456789012345678901234567890")
    assert p["c"] == Decimal("1e-400") and p["c"] != 0
    assert p["d"] == 1.5 and type(p["d"]) is float
    assert p["f"] == 10**20
    # sending the decoded payload back stores the very same jsonb
    api.send("q", p)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT ev_payload FROM pglogq.event ORDER BY ev_id DESC LIMIT 1) = %s::jsonb", (original,)
        ).fetchone()
    assert row is not None and row[0] is True


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, Decimal("NaN"), Decimal("Infinity")])
def test_nan_and_infinity_are_refused_client_side(api: Any, bad: Any) -> None:
    """NaN/Infinity are not JSON: InvalidPayload (PQ007's class), nothing sent."""
    setup(api)
    with pytest.raises(pglogq.InvalidPayload):
        api.send("q", {"x": bad})
    with pytest.raises(pglogq.InvalidPayload):
        api.send_batch("q", [{"ok": 1}, [bad]])
    with pytest.raises(pglogq.InvalidPayload):
        api.send("q", {"x": 1}, headers={"h": bad})
    assert api.queue_info("q")[0].pending_estimate == 0  # no id was even taken


def test_unserialisable_payloads_are_invalid_payload(api: Any) -> None:
    setup(api)
    with pytest.raises(pglogq.InvalidPayload):
        api.send("q", {"x": object()})
    with pytest.raises(pglogq.InvalidPayload):
        api.send("q", {(1, 2): "tuple key"})
    for not_a_list in ("abc", b"abc", {"a": 1}, 5):
        with pytest.raises(pglogq.InvalidPayload):
            api.send_batch("q", not_a_list)


def test_deep_payload_is_a_per_event_failure_not_a_stuck_page(api: Any, dsn: str) -> None:
    """Regression: nesting beyond what Python decodes made every receive raise; now only that
    message carries a decode error and the page can be nacked and acknowledged."""
    setup(api)
    first = sql_send(dsn, "'{\"n\": 1}'::jsonb")
    deep = sql_send(dsn, "(repeat('[', 5000) || repeat(']', 5000))::jsonb")
    last = sql_send(dsn, "'{\"n\": 3}'::jsonb")
    api.tick("q", force=True)
    page = api.receive("q", "c")
    msgs = list(page)
    assert [m.msg_id for m in msgs] == [first, deep, last]
    assert msgs[0].payload == {"n": 1} and msgs[2].payload == {"n": 3}
    bad = msgs[1]
    assert bad.decode_error is not None and "payload" in bad.decode_error
    assert isinstance(bad.payload, Undecodable) and bad.payload.text.startswith("[[[")
    assert page.nack(bad, reason=bad.decode_error) == "retry"
    assert page.ack() is True
    assert len(api.receive("q", "c")) == 0


@pytest.mark.parametrize("mode", MODES)
def test_consumer_dead_letters_an_undecodable_event_at_once_and_goes_on(
    mode: str, client: pglogq.Client, dsn: str
) -> None:
    """Regression: Consumer.run() crashed; then the bad event was retried max_retries times,
    although no retry can decode it.  Now it fails alone and goes to the dead-letter queue at
    once, with the decoding error as the reason; the rest of the page is handled."""
    setup(client)
    client.set_queue_config("q", "max_retries", 5)
    sql_send(dsn, "'{\"n\": 1}'::jsonb")
    deep = sql_send(dsn, "(repeat('[', 5000) || repeat(']', 5000))::jsonb")
    sql_send(dsn, "'{\"n\": 3}'::jsonb")
    client.tick("q", force=True)
    seen: list[Any] = []
    spec = Spec(dsn, "q", "c", kwargs={"retry_policy": pglogq.RetryPolicy.fixed(timedelta(0))})
    spec.handler()(lambda msg: seen.append(msg.payload))
    stats = run_once(mode, spec, stop_when_idle=True)
    assert seen == [{"n": 1}, {"n": 3}]
    assert (stats.handled, stats.failed, stats.retried, stats.dead) == (2, 1, 0, 1)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.retry").fetchone() == (0,)
        row = conn.execute("SELECT msg_id, reason, retry_count FROM pglogq.dead_letter").fetchone()
    assert row is not None and row[0] == deep and row[2] == 0
    assert "UndecodableEvent" in row[1] and "payload" in row[1], row[1]
    [dead] = client.dlq_inspect("q")  # and it can still be inspected from Python
    assert dead.msg_id == deep and isinstance(dead.payload, Undecodable) and dead.decode_error is not None


def test_nack_dead_buries_at_once_whatever_retries_are_left(api: Any, dsn: str) -> None:
    """nack(..., dead => true): to the dead-letter queue on the first failure ('dead'), with the
    reason; a plain nack of the same queue is still a retry."""
    setup(api)
    api.set_queue_config("q", "max_retries", 5)
    a = api.send("q", {"n": 1})
    b = api.send("q", {"n": 2})
    api.tick("q", force=True)
    page = api.receive("q", "c")
    ma, mb = list(page)
    assert page.nack(ma, reason="cannot decode", dead=True) == "dead"
    assert page.nack(mb, reason="try again") == "retry"
    assert page.ack() is True
    [dead] = api.dlq_inspect("q")
    assert (dead.msg_id, dead.reason) == (a, "cannot decode")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT msg_id FROM pglogq.retry").fetchall() == [(b,)]


def test_a_long_number_anywhere_in_a_page_keeps_every_event_exact(api: Any, dsn: str) -> None:
    """The client checks once per page that orjson decodes it exactly (no digit run of 17 or
    more); a page holding one such number decodes each event by the exact rule, the same values
    as alone, and the headers are part of the check."""
    setup(api)
    plain = [{"n": i, "amount": 99.95} for i in range(5)]
    api.send_batch("q", plain)
    sql_send(dsn, "'{\"long\": 0.12345678901234567890123}'::jsonb")
    api.send("q", {"n": 9}, headers={"big": 2**70 + 1})
    api.send("q", {"sum": 0.1 + 0.2})
    api.tick("q", force=True)
    msgs = list(api.receive("q", "c"))
    assert [m.payload for m in msgs[:5]] == plain
    assert msgs[5].payload == {"long": Decimal("0.12345678901234567890123")}
    assert msgs[6].headers == {"big": 2**70 + 1} and type(msgs[6].headers["big"]) is int
    assert msgs[7].payload == {"sum": 0.1 + 0.2}
    assert all(m.decode_error is None for m in msgs)
    only_plain = sql_send(dsn, "'{\"x\": 1234567890123456}'::jsonb")  # 16 digits: orjson is exact
    assert api.receive("q", "c").ack() is True
    api.tick("q", force=True)
    [msg] = list(api.receive("q", "c"))
    assert msg.msg_id == only_plain and msg.payload == {"x": 1234567890123456}


def test_a_long_number_far_into_a_large_page_keeps_every_event_exact(api: Any, dsn: str) -> None:
    """The check goes a group of rows at a time: a long number in a late row of a large page (in
    its payload, then in its headers) still sends the whole page through the exact rule."""
    setup(api)
    api.send_batch("q", [{"n": i, "amount": 99.95} for i in range(500)])
    sql_send(dsn, "'{\"long\": 0.12345678901234567890123}'::jsonb")
    api.send_batch("q", [{"n": i} for i in range(100)])
    api.tick("q", force=True)
    page = api.receive("q", "c", max_messages=1000)
    msgs = list(page)
    assert len(msgs) == 601 and msgs[500].payload == {"long": Decimal("0.12345678901234567890123")}
    assert [m.payload["n"] for m in msgs[:500]] == list(range(500))
    assert all(m.decode_error is None for m in msgs)
    assert page.ack() is True
    api.send_batch("q", [{"n": i} for i in range(300)])
    api.send("q", {"n": 300}, headers={"long": Decimal("0.12345678901234567890123")})
    api.tick("q", force=True)
    msgs = list(api.receive("q", "c", max_messages=1000))
    assert len(msgs) == 301 and msgs[300].headers == {"long": Decimal("0.12345678901234567890123")}
