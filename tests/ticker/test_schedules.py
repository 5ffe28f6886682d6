"""Schedules, periodic sends made by the ticker.

Exactly one event per due time, with several tickers at once and across restarts; the missed-run
policies; bad input refused with its own SQLSTATE and nothing changed."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq import schedules
from tests.support.waiting import wait_for


def set_next_due(dsn: str, name: str, when: str) -> datetime:
    """Move a schedule's next due time (what a ticker that was away for a while finds)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            f"UPDATE pglogq.schedule SET next_due = {when} WHERE name = %s RETURNING next_due", (name,)
        ).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def sent_events(dsn: str, name: str) -> list[tuple[int, str]]:
    """(msg_id, pglogq_due) of every event the schedule sent, by msg_id."""
    with psycopg.connect(dsn) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            "SELECT ev_id, ev_headers->>'pglogq_due' FROM pglogq.event"
            " WHERE ev_headers->>'pglogq_schedule' = %s ORDER BY ev_id", (name,)).fetchall()]


def due_times(cron: str, start: datetime, until: datetime) -> int:
    n, t = 0, start
    while t <= until:
        n, t = n + 1, schedules.next_due(cron, t)
    return n


def fire(dsn: str, passes: int = 1, tickers: int = 1) -> list[dict[str, int]]:
    """``passes`` rounds of the ticker's schedule step, ``tickers`` of them at once each round."""

    async def main() -> list[dict[str, int]]:
        conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(tickers)]
        out: list[dict[str, int]] = []
        try:
            for _ in range(passes):
                out += await asyncio.gather(*(schedules.fire_due(c) for c in conns))
        finally:
            for c in conns:
                await c.close()
        return out

    return asyncio.run(main())


def test_a_schedule_is_planned_then_sent_once_per_due_time(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    assert client.schedule_add("q", "nightly", "0 3 * * *", {"job": "cleanup"}, type="cleanup",
                               headers={"team": "ops"}, priority=5) is True
    [s] = client.schedule_list("q")
    assert (s.name, s.cron, s.type, s.payload, s.headers, s.priority, s.missed, s.next_due) == (
        "nightly", "0 3 * * *", "cleanup", {"job": "cleanup"}, {"team": "ops"}, 5, "skip", None)
    assert fire(dsn)[0]["planned"] == 1
    [s] = client.schedule_list("q")
    assert s.next_due == schedules.next_due("0 3 * * *", s.created_at)
    assert fire(dsn) == [{"sent": 0, "skipped": 0, "planned": 0}]  # not due yet
    due = set_next_due(dsn, "nightly", "date_trunc('second', clock_timestamp()) - interval '5 seconds'")
    assert fire(dsn)[0]["sent"] == 1
    [(msg_id, due_text)] = sent_events(dsn, "nightly")
    assert due_text == due.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    [s] = client.schedule_list("q")
    assert (s.last_due, s.last_msg_id, s.sent, s.skipped) == (due, msg_id, 1, 0)
    assert s.next_due == schedules.next_due("0 3 * * *", due)
    assert fire(dsn, passes=3) == [{"sent": 0, "skipped": 0, "planned": 0}] * 3
    client.subscribe("q", "a")  # a normal event of the queue: lookup knows it (sent before "a" subscribed)
    assert [(j.consumer, j.type) for j in client.lookup("q", msg_id)] == [("a", "cleanup")]


def test_several_tickers_at_once_send_each_due_time_once(client: pglogq.Client, dsn: str) -> None:
    """HA: a failover can leave two tickers running the schedule step together for a while."""
    client.create_queue("q")
    client.schedule_add("q", "often", "* * * * *", {}, missed="catch_up")
    client.schedule_add("q", "other", "*/2 * * * *", {}, missed="catch_up")
    fire(dsn)
    start_often = set_next_due(dsn, "often", "date_trunc('minute', clock_timestamp()) - interval '30 minutes'")
    start_other = set_next_due(dsn, "other", "date_trunc('hour', clock_timestamp()) - interval '2 hours'")
    results = fire(dsn, passes=3, tickers=4)
    now = datetime.now(timezone.utc)
    often = sent_events(dsn, "often")
    other = sent_events(dsn, "other")
    assert sum(r["sent"] for r in results) == len(often) + len(other)
    for events in (often, other):
        dues = [d for _, d in events]
        assert len(dues) == len(set(dues))  # never twice
    # every due time from the start up to now (give or take the one that fell due meanwhile)
    assert len(often) - due_times("* * * * *", start_often, now) in (0, 1)
    assert len(other) - due_times("*/2 * * * *", start_other, now) in (0, 1)


def test_a_ticker_restart_resends_nothing(client: pglogq.Client, dsn: str) -> None:
    """A ticker that dies after the send's transaction committed and starts again."""
    client.create_queue("q")
    client.schedule_add("q", "s", "* * * * *", {})
    fire(dsn)
    due = set_next_due(dsn, "s", "date_trunc('second', clock_timestamp()) - interval '1 second'")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the step a ticker made before dying
        row = conn.execute("SELECT outcome, msg_id FROM pglogq.schedule_fire('q', 's', %s, %s)",
                           (due, schedules.next_due("* * * * *", due))).fetchone()
        assert row is not None and row[0] == "sent"
        # a ticker that still believes `due` is next (it read the schedule before) gets 'stale'
        again = conn.execute("SELECT outcome FROM pglogq.schedule_fire('q', 's', %s, %s)",
                             (due, schedules.next_due("* * * * *", due))).fetchone()
        assert again == ("stale",)
        # even if next_due is moved back by hand, the due time's key refuses a second send
        conn.execute("UPDATE pglogq.schedule SET next_due = %s", (due,))
        again = conn.execute("SELECT outcome FROM pglogq.schedule_fire('q', 's', %s, %s)",
                             (due, schedules.next_due("* * * * *", due))).fetchone()
        assert again == ("stale",)
    assert len(sent_events(dsn, "s")) == 1


def test_missed_runs_skip_or_catch_up(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.schedule_add("q", "hourly_skip", "0 * * * *", {})
    client.schedule_add("q", "hourly_all", "0 * * * *", {}, missed="catch_up")
    fire(dsn)
    since = "date_trunc('hour', clock_timestamp()) - interval '5 hours'"
    start = set_next_due(dsn, "hourly_skip", since)
    set_next_due(dsn, "hourly_all", since)
    fire(dsn, passes=2)
    with psycopg.connect(dsn) as conn:
        now = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
    expected = [start + timedelta(hours=h) for h in range(6) if start + timedelta(hours=h) <= now]
    assert [d for _, d in sent_events(dsn, "hourly_all")] == [
        e.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") for e in expected]
    # skip: the ones more than a minute late are not sent (unless the last one is within the minute)
    late = [e for e in expected if e >= now - timedelta(minutes=1)]
    assert len(sent_events(dsn, "hourly_skip")) == len(late)
    listed = {s.name: s for s in client.schedule_list("q")}
    assert listed["hourly_skip"].skipped >= 1 and listed["hourly_skip"].next_due > now  # type: ignore[operator]
    assert listed["hourly_all"].sent == len(expected)


def test_the_ticker_sends_due_schedules(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    client.schedule_add("q", "s", "* * * * *", {"ping": True}, type="ping")
    with pglogq.start_ticker(dsn, idle_interval=0.05, maint_interval=0.05):
        wait_for(lambda: client.schedule_list("q")[0].next_due)
        set_next_due(dsn, "s", "clock_timestamp()")
        wait_for(lambda: client.schedule_list("q")[0].sent == 1 or None)

        def got() -> list[pglogq.Message] | None:
            b = client.receive("q", "a")
            return b.messages or None

        [m] = wait_for(got)
    assert (m.type, m.payload, m.headers["pglogq_schedule"]) == ("ping", {"ping": True}, "s")  # type: ignore[index]


def test_remove_stops_it(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.schedule_add("q", "s", "* * * * *", {})
    fire(dsn)
    set_next_due(dsn, "s", "clock_timestamp() - interval '1 second'")
    assert client.schedule_remove("q", "s") is True
    assert fire(dsn)[0] == {"sent": 0, "skipped": 0, "planned": 0}
    assert client.schedule_list() == [] and sent_events(dsn, "s") == []
    with pytest.raises(pglogq.UnknownSchedule) as exc:
        client.schedule_remove("q", "s")
    assert exc.value.sqlstate == "PQ067"


def schedule_rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT name, cron, ev_payload, missed FROM pglogq.schedule ORDER BY name").fetchall()


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("s", "61 * * * *", {}), {}, pglogq.InvalidSchedule),
        (("s", "* * * *", {}), {}, pglogq.InvalidSchedule),
        (("s", "* * * * * *", {}), {}, pglogq.InvalidSchedule),
        (("s", "0 0 30 2 *", {}), {}, pglogq.InvalidSchedule),        # never matches
        (("s", "", {}), {}, pglogq.InvalidSchedule),
        (("s", None, {}), {}, pglogq.InvalidSchedule),
        (("s", "@daily", {}), {}, pglogq.InvalidSchedule),
        (("1s", "* * * * *", {}), {}, pglogq.InvalidSchedule),      # bad name
        (("s" * 64, "* * * * *", {}), {}, pglogq.InvalidSchedule),
        (("s", "* * * * *", {}), {"missed": "run_all"}, pglogq.InvalidSchedule),
        (("s", "* * * * *", {}), {"priority": 40000}, pglogq.InvalidArgument),
        (("s", "* * * * *", {}), {"headers": []}, pglogq.InvalidPayload),
        (("existing", "*/5 * * * *", {}), {}, pglogq.ScheduleExists),  # same name, another definition
    ],
)
def test_bad_schedules_are_refused_and_change_nothing(
    client: pglogq.Client, dsn: str, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    client.create_queue("q")
    client.schedule_add("q", "existing", "* * * * *", {})
    before = schedule_rows(dsn)
    with pytest.raises(error):
        client.schedule_add("q", *args, **kwargs)
    assert schedule_rows(dsn) == before
    assert client.schedule_add("q", "existing", "*  * * *   *", {}) is False  # same definition: no-op


def test_bad_schedules_from_sql(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for sql in ("SELECT pglogq.schedule_add('q', 's', 'every day', '{}')",
                    "SELECT pglogq.schedule_add('q', 's', NULL, '{}')",
                    "SELECT pglogq.schedule_add('q', 's', '* * * * *', '{}', missed => NULL)",
                    "SELECT pglogq.schedule_add('q', 's', '* * * * *', '{}', first_due => 'infinity')",
                    "SELECT * FROM pglogq.schedule_fire('q', 's', now(), now())",
                    "SELECT * FROM pglogq.schedule_fire('q', 's', now(), NULL)"):
            with pytest.raises(psycopg.Error) as exc:
                conn.execute(sql)
            assert exc.value.sqlstate == "PQ066", sql
        with pytest.raises(psycopg.Error) as exc:
            conn.execute("SELECT pglogq.schedule_add('nope', 's', '* * * * *', '{}')")
        assert exc.value.sqlstate == "PQ001"
        with pytest.raises(psycopg.Error) as exc:
            conn.execute("SELECT pglogq.schedule_add('q', 's', '* * * * *', NULL)")
        assert exc.value.sqlstate == "PQ007"
    assert schedule_rows(dsn) == []


def test_an_expression_cronsim_refuses_is_logged_not_fatal(
    client: pglogq.Client, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Added through SQL (shape checked only): the ticker leaves it unplanned, the others go on."""
    client.create_queue("q")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.schedule_add('q', 'bad', '99 * * * *', '{}')")
    client.schedule_add("q", "good", "* * * * *", {})
    assert fire(dsn)[0]["planned"] == 1
    assert {s.name: s.next_due is None for s in client.schedule_list("q")} == {"bad": True, "good": False}
    assert "schedule bad of queue q cannot be planned" in caplog.text


def test_dropping_the_queue_drops_its_schedules(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.schedule_add("q", "s", "* * * * *", {})
    fire(dsn)
    client.drop_queue("q", force=True)
    assert schedule_rows(dsn) == [] and client.schedule_list() == []


def test_a_failover_between_two_tickers_sends_each_due_time_once(client: pglogq.Client, dsn: str) -> None:
    """Ticker A is stopped while it works through a catch-up; standby B takes over and finishes it."""
    client.create_queue("q")
    client.schedule_add("q", "s", "* * * * *", {}, missed="catch_up")
    fire(dsn)
    start = set_next_due(dsn, "s", "date_trunc('minute', clock_timestamp()) - interval '3 hours'")
    a = pglogq.start_ticker(dsn, idle_interval=0.05, maint_interval=0.02)
    wait_for(lambda: a.state == "active", "ticker A to be the active one")
    b = pglogq.start_ticker(dsn, idle_interval=0.05, maint_interval=0.02, standby_retry=0.05)
    try:
        wait_for(lambda: sent_events(dsn, "s"), "ticker A to start sending")
        a.stop()  # wherever it was: between two due times, or inside one's transaction
        now = datetime.now(timezone.utc)
        expected = due_times("* * * * *", start, now)
        wait_for(lambda: len(sent_events(dsn, "s")) >= expected or None, "ticker B to finish the catch-up")
    finally:
        a.stop()
        b.stop()
    dues = [d for _, d in sent_events(dsn, "s")]
    assert len(dues) == len(set(dues))
    assert len(dues) - expected in (0, 1)  # one more if a minute began meanwhile
    # B counts what it sent (A, stopped in the middle of a pass, never counted its own)
    by_b = b.engine.stats.maintenance.get("schedule_sent", 0)
    assert len(dues) - by_b >= 1
    print(f"ticker A sent {len(dues) - by_b}, ticker B {by_b}")


def add_schedules(dsn: str, n: int, next_due: str, cron: str = "* * * * *") -> None:
    """``n`` schedules of queue q at once (a crowd, as a big deployment has), then ANALYZE."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pglogq.schedule (queue_id, name, cron, ev_payload, next_due)"
            " SELECT (SELECT queue_id FROM pglogq.queue WHERE queue_name = 'q'), 's' || i, %s,"
            f" '{{}}', {next_due} FROM generate_series(1, {n}) i", (cron,))
        conn.execute("ANALYZE pglogq.schedule")


def test_a_pass_with_nothing_due_reads_no_schedule_row(client: pglogq.Client, dsn: str) -> None:
    """Thousands of schedules, none due: a pass probes the next_due index and reads no schedule
    row (it used to read every schedule through schedule_list, then filter)."""
    client.create_queue("q")
    add_schedules(dsn, 2000, "clock_timestamp() + interval '1 day'")
    stats = ("SELECT seq_scan, seq_tup_read, coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
             " WHERE relid = 'pglogq.schedule'::regclass")

    async def one_pass() -> tuple[Any, Any, dict[str, int]]:
        # one transaction around the pass: pg_stat_xact_user_tables counts what it read
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            before = await (await conn.execute(stats)).fetchone()
            fired = await schedules.fire_due(conn)
            after = await (await conn.execute(stats)).fetchone()
            await conn.rollback()
        return before, after, fired

    before, after, fired = asyncio.run(one_pass())
    assert fired == {"sent": 0, "skipped": 0, "planned": 0}
    # no scan of the table; at most the index's end the planner looks at to estimate the probe
    assert after[0] - before[0] == 0
    assert (after[1] - before[1]) + (after[2] - before[2]) <= 2


def test_a_pass_with_many_due_fires_at_most_its_bound(client: pglogq.Client, dsn: str) -> None:
    """More schedules due at once than a pass handles: a pass fires PER_PASS due times, the
    longest due first; the next passes take the rest, each due time sent once."""
    client.create_queue("q")
    n = 2 * schedules.PER_PASS + 50
    # due within the last second, the higher the number the longer ago; yearly: one due time each
    add_schedules(dsn, n, "now() - interval '1 millisecond' * i", cron="0 0 1 1 *")  # one now(): strict order
    [first] = fire(dsn)
    assert first["sent"] + first["skipped"] == schedules.PER_PASS
    with psycopg.connect(dsn) as conn:
        fired = {r[0] for r in conn.execute("SELECT name FROM pglogq.schedule WHERE last_due IS NOT NULL")}
    # the longest due went first: the highest numbers
    assert fired == {f"s{i}" for i in range(n - schedules.PER_PASS + 1, n + 1)}
    rest = fire(dsn, passes=3)
    assert [r["sent"] + r["skipped"] for r in rest] == [schedules.PER_PASS, 50, 0]
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*), sum(sent + skipped) FROM pglogq.schedule"
                           " WHERE last_due IS NOT NULL AND next_due > clock_timestamp()").fetchone()
    assert row == (n, n)


def test_listing_the_soonest_schedules_reads_only_those(client: pglogq.Client, dsn: str) -> None:
    """schedule_list with max_rows (what status shows) reads the soonest rows off the next_due
    index, not every schedule."""
    client.create_queue("q")
    add_schedules(dsn, 2000, "now() + interval '1 second' * i")
    stats = ("SELECT seq_scan, seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
             " WHERE relid = 'pglogq.schedule'::regclass")
    with psycopg.connect(dsn) as conn:
        before = conn.execute(stats).fetchone()
        names = [r[0] for r in conn.execute("SELECT name FROM pglogq.schedule_list(NULL, 10)")]
        after = conn.execute(stats).fetchone()
        conn.rollback()
    assert names == [f"s{i}" for i in range(1, 11)]
    assert before is not None and after is not None
    assert after[0] - before[0] == 0 and after[1] - before[1] <= 12
    # one queue's page, beside another queue's schedules that are sooner: its own index, in its
    # order (it read and sorted every schedule of the queue: 22 ms a page at 10,000)
    client.create_queue("other")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pglogq.schedule (queue_id, name, cron, ev_payload, next_due)"
                     " SELECT (SELECT queue_id FROM pglogq.queue WHERE queue_name = 'other'), 'o' || i,"
                     " '* * * * *', '{}', now() - interval '1 hour' FROM generate_series(1, 500) i")
        conn.execute("ANALYZE pglogq.schedule")
    with psycopg.connect(dsn) as conn:
        before = conn.execute(stats).fetchone()
        page = conn.execute("SELECT queue, name FROM pglogq.schedule_list('q', 10)").fetchall()
        after = conn.execute(stats).fetchone()
        conn.rollback()
    assert page == [("q", f"s{i}") for i in range(1, 11)]
    assert before is not None and after is not None
    assert after[0] - before[0] == 0 and after[1] - before[1] <= 12
    with pytest.raises(pglogq.InvalidArgument):
        client.schedule_list("q", max_rows=0)
