"""The in-process ticker (thread and asyncio task), the stalled-ticker warning, settings, and
the SQL restore check."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pglogq
from pglogq.errors import RestoreDetected, translate
from pglogq.tickerd import State, ticker_stalled
from pglogq.tickerd import queries as tq
from pglogq.tickerd.engine import maint_pause, pace
from pglogq.tickerd.settings import load_settings, parse_duration, read_env_file
from tests.support.db import with_db
from tests.support.draining import drain
from tests.support.paths import REPO
from tests.support.tickers import lock_holder_pids
from tests.support.waiting import wait_for


@pytest.fixture
def queue(client: pglogq.Client) -> str:
    client.create_queue("q")
    client.subscribe("q", "c")
    return "q"


def test_start_ticker_delivers_and_stop_releases_the_lock(dsn: str, client: pglogq.Client, queue: str) -> None:
    handle = pglogq.start_ticker(dsn)
    try:
        assert handle.wait_active()
        assert lock_holder_pids(dsn) == [os.getpid()]
        ids = client.send_batch(queue, [{"n": i} for i in range(3)])
        got: list[int] = []
        wait_for(lambda: got.extend(m.msg_id for m in drain(client, queue, "c")) or len(got) >= 3, "delivery")
        assert got == ids
        assert handle.stats.ticks >= 1
    finally:
        handle.stop()
    assert not handle.running and handle.state == State.STOPPED
    wait_for(lambda: lock_holder_pids(dsn) == [], "the ticker lock to be released")


def test_start_ticker_takes_a_client_and_is_a_context_manager(client: pglogq.Client, queue: str) -> None:
    with pglogq.start_ticker(client, interval="5ms", idle_interval=0.05) as handle:
        assert handle.engine.settings.busy_interval == 0.005
        assert handle.engine.settings.idle_interval == 0.05
        msg = client.send(queue, {"x": 1})
        wait_for(lambda: [m.msg_id for m in drain(client, queue, "c")] == [msg], "delivery")
    assert not handle.running


def test_keep_alive_ticks_do_not_keep_the_busy_pace(dsn: str, queue: str) -> None:
    """A keep-alive falls due on every poll here (ticker_idle_period of a microsecond, as 1,000
    idle queues make one due every few milliseconds): the ticks go on, and the poll interval
    still backs off to idle_interval (it stayed at the busy 5 ms for as long as they went on)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 microsecond'")
    with pglogq.start_ticker(dsn, interval="5ms", idle_interval=0.05, linger=0.02, maintenance=False) as handle:
        stats = handle.engine.stats
        wait_for(lambda: stats.poll_interval == 0.05 and stats.ticks >= 10, "the idle pace with keep-alives")
        ticks = stats.ticks
        wait_for(lambda: stats.ticks > ticks + 3, "more keep-alives")
        assert stats.poll_interval == 0.05


SLEEPING = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'"
            " AND objsubid = 2 AND objid = 0 AND classid::bigint = hashtext('pglogq.ticker')::bigint & 4294967295"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def _sleeping(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(SLEEPING).fetchone()
        return bool(row and row[0])


def test_an_idle_ticker_sleeps_and_what_gives_it_work_wakes_it(dsn: str, client: pglogq.Client, queue: str) -> None:
    """With nothing to tick (linger after the last events) the daemon sleeps (pglogq.ticker_sleep)
    until a NOTIFY or its next keep-alive, and its maintenance pauses until woken with it or until a
    retry falls due: here both an hour away, so every event below is ticked only because its
    send woke the daemon at commit, and the retry only because the nack woke maintenance, which
    then paused until the retry fell due and pumped it (the pump woke the ticker)."""
    client.set_queue_config(queue, "ticker_idle_period", "1 hour")
    with pglogq.start_ticker(dsn, idle_interval=0.05, sleep_max=3600, maint_interval=0.05,
                             maint_idle_interval=3600) as handle:
        wait_for(lambda: _sleeping(dsn), "the idle ticker to sleep")
        msg = client.send(queue, {"n": 1})
        wait_for(lambda: [m.msg_id for m in drain(client, queue, "c")] == [msg], "the send ticked")
        wait_for(lambda: _sleeping(dsn), "the ticker to sleep again")
        client.send(queue, {"n": 2})
        batch = wait_for(lambda: client.receive(queue, "c") or None, "the second event")
        wait_for(lambda: _sleeping(dsn) and handle.stats.maint_pause == 3600, "both to pause while it is handled")
        batch.nack(batch.messages[0], retry_after=timedelta(seconds=1))
        batch.ack()
        wait_for(lambda: [m.payload for m in drain(client, queue, "c")] == [{"n": 2}], "the retry ticked")
        polls = handle.stats.polls
    assert handle.stats.polls >= polls and not handle.running  # a stop while asleep returns


def test_the_ticker_sleeps_as_soon_as_the_busy_pace_ends(dsn: str, client: pglogq.Client, queue: str) -> None:
    """``linger`` after the last tick of events the daemon sleeps, whatever its backed-off pace:
    an event sent while the pace backs off (here toward an idle pace of an hour, which it would
    take the daemon hours to reach) is ticked at its commit, not at the next poll.  Sleeping at
    the idle pace only left the first job after a short pause waiting up to 200 ms."""
    client.set_queue_config(queue, "ticker_idle_period", "1 hour")
    with pglogq.start_ticker(dsn, idle_interval=3600, linger=0.05, sleep_max=3600, maintenance=False):
        wait_for(lambda: _sleeping(dsn), "the ticker to sleep")
        msg = client.send(queue, {"n": 1})
        wait_for(lambda: [m.msg_id for m in drain(client, queue, "c")] == [msg], "the send ticked")
        # the tick of events set the busy pace; linger later it sleeps, far below the idle pace
        wait_for(lambda: _sleeping(dsn), "the ticker to sleep again after linger")
        msg = client.send(queue, {"n": 2})
        wait_for(lambda: [m.msg_id for m in drain(client, queue, "c")] == [msg], "the second send ticked")


def test_a_role_granted_ticker_but_not_ticker_sleep_ticks_by_polling(dsn: str, client: pglogq.Client,
                                                                    queue: str) -> None:
    """A deployment that granted its ticking role the tick functions one by one, before
    ticker_sleep existed: the daemon polls at its idle pace instead of failing to sleep."""
    role = f"pglogq_test_ticking_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT USAGE ON SCHEMA pglogq TO "{role}"')
        conn.execute(f'GRANT EXECUTE ON FUNCTION pglogq.ticker(text), pglogq.ticker_check(boolean) TO "{role}"')
    try:
        with pglogq.start_ticker(make_conninfo(dsn, user=role), idle_interval=0.05, maintenance=False) as handle:
            assert handle.wait_active()
            wait_for(lambda: handle.stats.poll_interval == 0.05, "the idle pace")
            polls = handle.stats.polls
            wait_for(lambda: handle.stats.polls > polls + 20, "polls at the idle pace")
            assert not _sleeping(dsn)
            msg = client.send(queue, {"n": 1})
            wait_for(lambda: [m.msg_id for m in drain(client, queue, "c")] == [msg], "the send ticked")
            assert (handle.stats.errors, handle.stats.reconnects) == (0, 0)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_maintenance_pauses_only_while_the_ticker_sleeps_and_nothing_is_listed() -> None:
    """The pause of maintenance after a pass (pglogq.tickerd.engine.maint_pause, no server)."""
    s = load_settings({"dsns": ("postgresql:///x",)}, env={})
    base, most = s.maint_interval, s.maint_idle_interval
    assert maint_pause(s, listed=False, ticker_asleep=False, next_due=None) == base
    assert maint_pause(s, listed=True, ticker_asleep=True, next_due=None) == base
    assert maint_pause(s, listed=False, ticker_asleep=True, next_due=None) == most
    assert maint_pause(s, listed=False, ticker_asleep=True, next_due=3 * base) == 3 * base
    assert maint_pause(s, listed=False, ticker_asleep=True, next_due=-1.0) == base


def test_a_call_cut_short_is_followed_at_once_and_keeps_the_pace() -> None:
    """The daemon's pace (pglogq.tickerd.engine.pace, no server needed): events flowing set the
    busy pace; a call cut short with queues still due (keep-alives of more than 20 queues falling
    due together) is followed after busy_interval and leaves the pace as it was: it started a
    second of polling every 5 ms (200 calls), at 1,000 idle queues every few seconds."""
    s = load_settings({"dsns": ("postgresql:///x",)}, env={})
    busy, idle = s.busy_interval, s.idle_interval
    assert pace(s, idle, 60.0, flow=False, cut_short=True) == (idle, busy)
    assert pace(s, idle, 60.0, flow=False, cut_short=False) == (idle, idle)
    assert pace(s, idle, 60.0, flow=True, cut_short=False) == (busy, busy)
    assert pace(s, busy, 0.0, flow=False, cut_short=False) == (busy, busy)  # lingering
    assert pace(s, busy, s.linger, flow=False, cut_short=False) == (2 * busy, 2 * busy)
    assert pace(s, busy, s.linger, flow=False, cut_short=True) == (busy, busy)


def test_two_in_process_tickers_one_active_then_takeover(dsn: str) -> None:
    a = pglogq.start_ticker(dsn, standby_retry=0.05)
    b = pglogq.start_ticker(dsn, standby_retry=0.05)
    try:
        wait_for(lambda: State.ACTIVE in (a.state, b.state), "one active ticker")
        active, standby = (a, b) if a.state == State.ACTIVE else (b, a)
        wait_for(lambda: standby.state == State.STANDBY, "the other to stand by")
        assert active.state == State.ACTIVE
        active.stop()
        assert standby.wait_active()
    finally:
        a.stop()
        b.stop()


def test_async_ticker(dsn: str) -> None:
    async def main() -> list[int]:
        async with pglogq.AsyncClient(dsn) as client:
            await client.create_queue("aq")
            await client.subscribe("aq", "c")
            handle = pglogq.start_async_ticker(client)
            try:
                assert await handle.wait_active()
                sent = [await client.send("aq", {"n": i}) for i in range(3)]
                got: list[int] = []
                for _ in range(3000):
                    batch = await client.receive("aq", "c")
                    got.extend(m.msg_id for m in batch)
                    if batch:
                        await batch.ack()
                    if len(got) >= 3:
                        break
                    await asyncio.sleep(0.02)
                assert got == sent
            finally:
                await handle.stop()
            assert handle.task.done() and handle.state == State.STOPPED
            return got

    assert len(asyncio.run(main())) == 3
    wait_for(lambda: lock_holder_pids(dsn) == [], "the ticker lock to be released")


def test_start_async_ticker_needs_a_running_loop(dsn: str) -> None:
    with pytest.raises(RuntimeError):
        pglogq.start_async_ticker(dsn)


def test_once_does_nothing_while_another_ticker_is_active(dsn: str, client: pglogq.Client, queue: str) -> None:
    with pglogq.start_ticker(dsn, maintenance=False) as handle:
        assert handle.wait_active()
        done = subprocess.run([sys.executable, "-m", "pglogq.tickerd", "--dsn", dsn, "--once"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "event=standby" in done.stderr and "pass_done" not in done.stderr


def test_schema_missing_is_said_clearly(server_dsn: str) -> None:
    name = f"pglogq_noschema_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        done = subprocess.run([sys.executable, "-m", "pglogq.tickerd", "--dsn", with_db(server_dsn, name), "--once"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1
        assert "schema is not installed" in done.stderr
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_unreachable_database_gives_exit_code_1() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pglogq.tickerd", "--once", "--dsn", "host=/nonexistent-dir dbname=x"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert "pass_failed" in done.stderr


# -- ticker_stalled --------------------------------------------------------------------------


def test_ticker_stalled_without_a_ticker_then_quiet_with_one(dsn: str, client: pglogq.Client, queue: str) -> None:
    client.send(queue, {"waiting": True})
    wait_for(lambda: (client.queue_info(queue)[0].ticker_lag or timedelta(0)) > timedelta(0), "a measurable lag")
    warning = ticker_stalled(client.queue_info(), max_lag=timedelta(0))
    assert warning is not None and '"q"' in warning and "pglogq-ticker" in warning
    assert ticker_stalled(client.queue_info()) is None  # default threshold: not yet
    with pglogq.start_ticker(dsn) as handle:
        assert handle.wait_active()
        wait_for(lambda: client.queue_info(queue)[0].ticker_lag == timedelta(0), "the tick")
        assert ticker_stalled(client.queue_info(queue), max_lag=timedelta(0)) is None


def _info(name: str, *, age: float | None = 1.0, lag: float = 0.0, paused: bool = False) -> pglogq.QueueInfo:
    now = datetime.now(timezone.utc)
    return pglogq.QueueInfo(
        queue_name=name, paused=paused, last_tick_id=1, last_tick_time=now,
        last_tick_age=None if age is None else timedelta(seconds=age), ticker_lag=timedelta(seconds=lag),
        events_per_second=0.0, pending_estimate=0, consumers=1, retry_depth=0, dead_letters=0, delayed=0,
        size_bytes=0, rotation_period=timedelta(hours=2), last_rotation=now, rotation_blocked_by=None,
    )


def test_ticker_stalled_rules() -> None:
    assert ticker_stalled([]) is None
    assert ticker_stalled(_info("fresh")) is None
    assert ticker_stalled(_info("never", age=None)) is None
    assert ticker_stalled(_info("paused", age=3600, lag=3600, paused=True)) is None
    old = ticker_stalled(_info("old", age=600))
    assert old is not None and '"old" (last tick 10m ago)' in old
    lagging = ticker_stalled(_info("lagging", lag=45))
    assert lagging is not None and '"lagging" (events waiting 45s for a tick)' in lagging
    many = ticker_stalled([_info(f"q{i}", age=900) for i in range(5)])
    assert many is not None and "and 2 more" in many


# -- settings ---------------------------------------------------------------------------------


def test_durations() -> None:
    assert parse_duration("5ms") == 0.005
    assert parse_duration("0.2") == 0.2
    assert parse_duration("2m") == 120
    for bad in ("-1", "fast", "5 parsecs", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_settings_precedence(tmp_path: Path) -> None:
    env_file = tmp_path / "ticker.env"
    env_file.write_text('# settings\nexport PGLOGQ_TICKER_IDLE_INTERVAL="300ms"\nPGLOGQ_DSN=dbname=fromfile\n')
    assert read_env_file(env_file)["PGLOGQ_TICKER_IDLE_INTERVAL"] == "300ms"
    env = {"PGLOGQ_TICKER_IDLE_INTERVAL": "1s", "PGLOGQ_TICKER_LINGER": "2s", "PGLOGQ_DSN": "dbname=fromenv"}
    s = load_settings({}, env, env_file=env_file)
    assert (s.idle_interval, s.linger, s.dsns) == (0.3, 2.0, ("dbname=fromfile",))
    s = load_settings({"idle_interval": 0.5, "dsns": ("dbname=a", "dbname=b")}, env, env_file=env_file)
    assert (s.idle_interval, s.dsns) == (0.5, ("dbname=a", "dbname=b"))
    with pytest.raises(ValueError):
        load_settings({"busy_interval": 1.0, "idle_interval": 0.1, "dsns": ("x",)}, {})
    bad = tmp_path / "bad.env"
    bad.write_text("just words\n")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        read_env_file(bad)


# -- the SQL restore check --------------------------------------------------------------------


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


def test_ticker_check_records_and_refuses_txids_going_backwards(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    first = conn.execute("SELECT status, previous_system_id FROM pglogq.ticker_check()").fetchone()
    assert first == ("first run", None)
    again = conn.execute("SELECT status, current_txid >= max_txid_seen FROM pglogq.ticker_check()").fetchone()
    assert again == ("ok", True)
    # as if this database had seen far higher txids in a cluster it was dumped from
    conn.execute("UPDATE pglogq.ticker_state SET max_txid_seen = '99999999999', system_id = 42")
    before = conn.execute("SELECT system_id, max_txid_seen::text, last_run_at FROM pglogq.ticker_state").fetchone()
    with pytest.raises(RestoreDetected) as info:
        try:
            conn.execute("SELECT * FROM pglogq.ticker_check()")
        except psycopg.Error as exc:
            raise translate(exc) from exc
    assert "went backwards" in str(info.value) and "--epoch=24" in str(info.value)
    after = conn.execute("SELECT system_id, max_txid_seen::text, last_run_at FROM pglogq.ticker_state").fetchone()
    assert after == before  # refused: nothing recorded


def test_ticker_check_accepts_a_new_cluster_whose_txids_are_ahead(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.execute("SELECT pglogq.ticker_check()")
    conn.execute("UPDATE pglogq.ticker_state SET system_id = 42, max_txid_seen = '3'")
    row = conn.execute("SELECT status, previous_system_id::text FROM pglogq.ticker_check()").fetchone()
    assert row == ("new cluster", "42")
    row = conn.execute("SELECT system_id <> 42 FROM pglogq.ticker_state").fetchone()
    assert row == (True,)
    with pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT pglogq.ticker_check(NULL)")
    assert info.value.sqlstate == "PQ019"


# -- the pg_cron alternative (its procedures; pg_cron itself is not needed to run them) -------


def test_pg_cron_procedures_tick_and_maintain(dsn: str, client: pglogq.Client, queue: str) -> None:
    sql = (REPO / "ticker" / "pg_cron.sql").read_text()
    procedures = sql.split("SELECT cron.schedule", 1)[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(procedures.encode())
        client.set_queue_config(queue, "rotation_period", "1 millisecond")
        sent = client.send(queue, {"via": "pg_cron"})
        conn.execute("CALL pglogq_cron.tick_loop('300 milliseconds')")
        assert [m.msg_id for m in drain(client, queue, "c")] == [sent]
        conn.execute("CALL pglogq_cron.tick_once()")
        before = conn.execute("SELECT cur_table FROM pglogq.queue").fetchone()
        conn.execute("CALL pglogq_cron.maintain()")
        after = conn.execute("SELECT cur_table, switch_step2 IS NOT NULL FROM pglogq.queue").fetchone()
        assert before is not None and after == ((before[0] + 1) % 3, True)  # step 1 and step 2 ran
        # while another ticker holds the lock, both return without ticking
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(pglogq_cron.lock_key())")
            assert lock_holder_pids(dsn) == []  # (not a ticker process: no pid in its name)
            client.send(queue, {"blocked": True})
            last = conn.execute("SELECT max(tick_id) FROM pglogq.tick").fetchone()
            conn.execute("CALL pglogq_cron.tick_once()")
            conn.execute("CALL pglogq_cron.tick_loop('200 milliseconds')")
            assert conn.execute("SELECT max(tick_id) FROM pglogq.tick").fetchone() == last
            other.execute("SELECT pg_advisory_unlock(pglogq_cron.lock_key())")
        conn.execute("CALL pglogq_cron.tick_once()")
        assert conn.execute("SELECT max(tick_id) FROM pglogq.tick").fetchone() != last
        assert conn.execute("SELECT pglogq_cron.lock_key() = %s", (tq.LOCK_KEY,)).fetchone() == (True,)


def test_rotation_blocked_by_label_names_who_without_the_changing_details() -> None:
    from pglogq.tickerd.metrics import blocked_by_label

    assert blocked_by_label(None) == ""
    assert blocked_by_label("consumer billing (at tick 5, 00:10:00 behind)") == "consumer billing"
    assert blocked_by_label("transaction of pid 4242 open since 2026-11-29 15:00:00+00") == "transaction of pid 4242"
    prepared = "prepared transaction 'tx''1'"
    assert blocked_by_label(f"{prepared} since 2026-11-29 15:00:00+00") == prepared
    # the database is part of who (the transaction may be in another database of the server)
    assert blocked_by_label('transaction of pid 4242 in database "shop ""eu""" (xid age 12, open since 2026-11-29'
                            ' 15:00:00+00)') == 'transaction of pid 4242 in database "shop ""eu"""'
    assert blocked_by_label(f'{prepared} in database "shop" since 2026-11-29 15:00:00+00 (xid age 3)') == (
        f'{prepared} in database "shop"')
