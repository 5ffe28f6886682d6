"""One set of health rules: ``pglogq status``, the dashboard's warnings and the ticker's
``pglogq_health_warning`` metric judge the same database state the same way (pglogq.health)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import pglogq
from pglogq.cli.errors import Exit
from pglogq.dashboard.sampler import Sampler
from pglogq.health import KINDS, Thresholds
from pglogq.tickerd import queries as tq
from pglogq.tickerd.metrics import findings
from tests.support.cli import run
from tests.support.dashboard import make_dead_letters, make_stuck_consumer
from tests.support.inflight import in_flight_job

# the thresholds every surface is given below, as the CLI's options say them
OPTIONS = ["--stale-after", "5m", "--silent-after", "1m", "--lag-after", "1h", "--max-pending", "2", "--fail-on-dead"]
THRESHOLDS = Thresholds(stale_after=timedelta(minutes=5), silent_after=timedelta(minutes=1),
                        lag_after=timedelta(hours=1), max_pending=2, fail_on_dead=True)


def _trouble(dsn: str, client: pglogq.Client) -> None:
    """A silent worker, a stale consumer with a backlog, dead letters and a paused queue."""
    in_flight_job(dsn, "w1", "90 seconds")
    client.create_queue("orders")
    make_stuck_consumer(client, "orders", "mailer", events=3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # not seen for 10 minutes: over --stale-after
        conn.execute("UPDATE pglogq.subscription SET last_seen = last_seen - interval '10 minutes',"
                     " heartbeat_at = heartbeat_at - interval '10 minutes'"
                     " WHERE queue_id = (SELECT queue_id FROM pglogq.queue WHERE queue_name = 'orders')")
    client.create_queue("payments")
    client.subscribe("payments", "ledger")
    make_dead_letters(client, "payments", "ledger", [{"n": 1}])
    client.create_queue("archive")
    client.set_queue_config("archive", "paused", True)
    # a share consumer whose only worker fell silent holding its lease, and nobody asks since
    client.create_queue("sharejobs")
    client.subscribe("sharejobs", "senders", share=True)
    client.send("sharejobs", {"n": 1})
    client.tick("sharejobs", force=True)
    assert client.receive("sharejobs", "senders", worker="gone", max_messages=1).messages
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE worker_name = 'gone'")


def _cli(dsn: str) -> set[tuple[str, str, str | None]]:
    r = run(dsn, "status", "--json", *OPTIONS)
    assert r.exit_code == 0, r.output
    return {(w["kind"], w["queue"], w["consumer"]) for w in json.loads(r.stdout)["warnings"]}


def _dashboard(dsn: str) -> set[tuple[str, str, str | None]]:
    async def take() -> set[tuple[str, str, str | None]]:
        async with pglogq.AsyncClient(dsn) as c:
            snap = await Sampler(c, thresholds=THRESHOLDS).snapshot(fresh=True)
        return {(w.kind, w.queue, w.consumer) for w in snap.warnings}
    return asyncio.run(take())


def _metrics(dsn: str) -> set[tuple[str, str, str | None]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        qs = conn.execute(tq.QUEUE_INFO).fetchall()
        cs = conn.execute(tq.CONSUMER_INFO).fetchall()
        ws = conn.execute(tq.IN_FLIGHT_SILENCE).fetchall()
    return {(f.kind, f.queue, f.consumer)
            for f in findings(qs, cs, ws, datetime.now(timezone.utc), thresholds=THRESHOLDS)}


def test_status_dashboard_and_metrics_give_the_same_findings(dsn: str, client: pglogq.Client) -> None:
    _trouble(dsn, client)
    cli = _cli(dsn)
    expected = {
        ("worker_silent", "reports_queue_with_a_long_name", "nightly_report_builder"),
        ("consumer_stale", "orders", "mailer"),
        ("backlog", "orders", "mailer"),
        ("dead_letters", "payments", None),
        ("paused", "archive", None),
        ("lease_expired", "sharejobs", "senders"),
    }
    assert expected <= cli, cli
    assert {k for k, _, _ in cli} <= set(KINDS)
    assert _dashboard(dsn) == cli
    assert _metrics(dsn) == cli


def test_status_check_thresholds_and_exit_codes(dsn: str, client: pglogq.Client) -> None:
    client.create_queue("jobs")
    client.subscribe("jobs", "w")
    client.send_batch("jobs", [{"n": i} for i in range(5)])
    client.tick("jobs", force=True)
    # five events pending, nothing wrong by the default rules: exit 0
    assert run(dsn, "status", "--check").exit_code == 0
    # a backlog over --max-pending is a problem
    r = run(dsn, "status", "--check", "--max-pending", "4")
    assert r.exit_code == Exit.CHECK_FAILED, r.output
    assert "5 event(s) pending (over 4)" in " ".join(r.stderr.split()), r.stderr
    assert run(dsn, "status", "--check", "--max-pending", "5").exit_code == 0
    # a lag over --lag-after: the oldest unpassed tick is older than that
    with psycopg.connect(dsn, autocommit=True) as conn:
        lag = conn.execute("SELECT lag FROM pglogq.consumer_info('jobs', 'w')").fetchone()
    assert lag is not None and lag[0] is not None
    over = max(lag[0] - timedelta(milliseconds=1), timedelta(0))
    r = run(dsn, "status", "--check", "--lag-after", f"{over.total_seconds() * 1000:.0f}ms")
    assert r.exit_code == Exit.CHECK_FAILED, r.output
    assert run(dsn, "status", "--check", "--lag-after", "1h").exit_code == 0
    # a dead letter is a problem with --fail-on-dead only
    client.subscribe("jobs", "dlq")
    make_dead_letters(client, "jobs", "dlq", [{"bad": True}])
    assert run(dsn, "status", "--check").exit_code == 0
    r = run(dsn, "status", "--check", "--fail-on-dead")
    assert r.exit_code == Exit.CHECK_FAILED, r.output
    assert "dead letter" in r.stderr
    # a paused queue informs, it is no problem
    client.set_queue_config("jobs", "paused", True)
    r = run(dsn, "status", "--json")
    assert "paused" in {w["kind"] for w in json.loads(r.stdout)["warnings"]}
    assert run(dsn, "status", "--check").exit_code == 0


@pytest.mark.parametrize("option", ["--max-pending", "--lag-after"])
def test_status_threshold_options_refuse_bad_values(dsn: str, option: str) -> None:
    r = run(dsn, "status", option, "-1")
    assert r.exit_code == Exit.USAGE, r.output
