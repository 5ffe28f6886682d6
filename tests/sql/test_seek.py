"""Consumer seek: the plan (pglogq.seek_plan) against what is actually replayed or skipped."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.cli.errors import Exit
from tests.support import draining
from tests.support.cli import fails, js, ok, run


def drain(client: pglogq.Client, consumer: str = "c", worker: str | None = None) -> list[int]:
    return [m.msg_id for m in draining.drain(client, "q", consumer, worker=worker, page=1000)]


@pytest.fixture
def loaded(client: pglogq.Client) -> list[list[int]]:
    """Queue q, consumer c; three ticks of 5, 7 and 9 events; c has consumed everything."""
    client.create_queue("q")
    client.subscribe("q", "c")
    rounds = []
    for n in (5, 7, 9):
        rounds.append(client.send_batch("q", [{"n": i} for i in range(n)]))
        client.tick("q", force=True)
    assert drain(client) == [i for r in rounds for i in r]
    return rounds


def tick_of(dsn: str, seq: int) -> tuple[int, str]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT tick_id, tick_time::text FROM pglogq.tick WHERE tick_event_seq = %s ORDER BY tick_id LIMIT 1",
            (seq,)).fetchone()
        assert row is not None
        return int(row[0]), str(row[1])


def test_plan_changes_nothing_and_matches_replay_to_earliest(client: pglogq.Client, loaded: Any) -> None:
    plan = client.seek_plan("q", "c", to="earliest")
    assert (plan.current_tick, plan.target_tick, plan.delta_events) == (4, 1, -21)
    assert (plan.earliest_tick, plan.latest_tick, plan.open_batches) == (1, 4, 0)
    assert client.seek_plan("q", "c", to="earliest") == plan
    assert drain(client) == []  # the plan moved nothing
    applied = client.seek("q", "c", to="earliest")
    assert applied.target_tick == 1 and applied.delta_events == -21
    replayed = drain(client)
    assert len(replayed) == -applied.delta_events
    assert replayed == [i for r in loaded for i in r]


def test_by_events_lands_on_the_nearest_tick(client: pglogq.Client, loaded: Any) -> None:
    plan = client.seek_plan("q", "c", by_events=-9)
    assert plan.target_tick == 3 and plan.delta_events == -9
    plan = client.seek_plan("q", "c", by_events=-10)  # closest tick: still 9 back
    assert plan.target_tick == 3 and plan.delta_events == -9
    applied = client.seek("q", "c", by_events=-10)
    assert drain(client) == loaded[2] and len(loaded[2]) == -applied.delta_events
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", by_events=-22)
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", by_events=1)


def test_to_tick_and_timestamp(client: pglogq.Client, loaded: Any, dsn: str) -> None:
    tick, when = tick_of(dsn, 5)
    plan = client.seek("q", "c", to=tick)
    assert plan.target_tick == tick == 2 and plan.delta_events == -16
    replayed = drain(client)
    assert replayed == loaded[1] + loaded[2] and len(replayed) == 16
    plan = client.seek("q", "c", to=when)  # the last tick at or before that time
    assert plan.target_tick == 2
    assert len(drain(client)) == -plan.delta_events == 16
    # before the queue existed: nothing was ever lost, so that is the earliest position
    plan = client.seek_plan("q", "c", to="15 minutes ago")
    assert plan.target_tick == 1 and plan.delta_events == -21
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", to=999)
    with pytest.raises(pglogq.InvalidArgument):
        client.seek_plan("q", "c", to="yesterdayish")
    with pytest.raises(pglogq.InvalidArgument):
        client.seek_plan("q", "c")
    with pytest.raises(pglogq.UnknownConsumer):
        client.seek_plan("q", "nobody", to="latest")


def test_latest_skips_the_backlog(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send_batch("q", [{"n": i} for i in range(30)])
    client.tick("q", force=True)
    plan = client.seek("q", "c", to="latest")
    assert plan.delta_events == 30 and plan.current_tick == 1 and plan.target_tick == 2
    assert drain(client) == []
    new = client.send("q", {"after": True})
    client.tick("q", force=True)
    assert drain(client) == [new]


def test_open_batches_refuse_unless_forced(client: pglogq.Client, loaded: Any) -> None:
    client.seek("q", "c", to="earliest")
    page = client.receive("q", "c", max_messages=3)
    assert len(page) == 3
    with pytest.raises(pglogq.BatchOpen):
        client.seek("q", "c", to="latest")
    plan = client.seek_plan("q", "c", to="latest")
    assert plan.open_batches == 1 and plan.current_tick == 1
    applied = client.seek("q", "c", to=3, force=True)
    assert applied.open_batches == 1 and applied.target_tick == 3
    with pytest.raises(pglogq.StaleBatch):
        page.ack()
    assert drain(client) == loaded[2]


def test_workers_open_batches_are_dropped_by_force(client: pglogq.Client, loaded: Any) -> None:
    client.seek("q", "c", to="earliest")
    page = client.receive("q", "c", max_messages=2, worker="w1")
    assert len(page) == 2
    plan = client.seek_plan("q", "c", to="latest")
    assert plan.open_batches == 1 and plan.current_tick == 1
    with pytest.raises(pglogq.BatchOpen):
        client.seek("q", "c", to="earliest")
    client.seek("q", "c", to="earliest", force=True)
    with pytest.raises(pglogq.StaleBatch):
        page.ack()
    assert sorted(drain(client, worker="w2")) == sorted(i for r in loaded for i in r)
    assert drain(client, worker="w1") == []


def test_earliest_follows_rotation(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    for _ in range(4):
        client.send_batch("q", [{"n": i} for i in range(5)])
        client.tick("q", force=True)
        drain(client)
        client.rotate("q", force=True)
        client.tick("q", force=True)
        drain(client)
    client.maintain()
    kept = []
    for _ in range(2):
        kept += client.send_batch("q", [{"n": i} for i in range(5)])
        client.tick("q", force=True)
    assert drain(client) == kept
    plan = client.seek_plan("q", "c", to="earliest")
    assert plan.earliest_tick > 1
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", to=1)
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", by_events=-30)
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        still_stored = int(row[0]) if row else -1
    client.seek("q", "c", to="earliest")
    replayed = drain(client)
    assert len(replayed) == -plan.delta_events
    assert set(kept) <= set(replayed) and len(replayed) <= still_stored < 30


def test_seek_is_for_admins_only(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        for fn in ("seek(text,text,text,bigint,boolean)", "seek_plan(text,text,text,bigint)"):
            for role, allowed in (("pglogq_admin", True), ("pglogq_writer", False), ("pglogq_reader", False)):
                row = conn.execute("SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                                   (role, f"pglogq.{fn}")).fetchone()
                assert row is not None and row[0] is allowed, (fn, role)


# -- the CLI --------------------------------------------------------------------------------


def test_cli_prints_the_plan_and_applies_only_with_execute(client: pglogq.Client, loaded: Any, dsn: str) -> None:
    plan = js(dsn, "consumer", "seek", "q", "c", "--by", "-16")
    assert plan["executed"] is False and plan["target_tick"] == 2 and plan["delta_events"] == -16
    assert {"current_tick", "current_tick_time", "earliest_tick", "latest_tick", "open_batches"} <= set(plan)
    human = ok(dsn, "consumer", "seek", "q", "c", "--to", "earliest").stdout
    assert "replays about 21 event(s)" in human and "--execute" in human
    assert drain(client) == []  # nothing applied
    done = js(dsn, "consumer", "seek", "q", "c", "--by", "-16", "--execute")
    assert done["executed"] is True
    assert len(drain(client)) == -done["delta_events"] == 16
    client.receive("q", "c", max_messages=1)  # nothing left: no open batch
    js(dsn, "consumer", "seek", "q", "c", "--to", "earliest", "--execute")
    assert len(client.receive("q", "c", max_messages=1)) == 1  # a batch is now open
    r = fails(dsn, Exit.CONFLICT, "consumer", "seek", "q", "c", "--to", "latest", "--execute")
    assert "--force" in r.stderr
    skip = js(dsn, "consumer", "seek", "q", "c", "--to", "latest", "--execute", "--force")
    assert skip["open_batches"] == 1 and skip["delta_events"] == 21
    assert "skips" not in ok(dsn, "consumer", "seek", "q", "c", "--to", "latest").stdout
    fails(dsn, Exit.INVALID, "consumer", "seek", "q", "c", "--to", "1 fortnight hence")
    fails(dsn, Exit.INVALID, "consumer", "seek", "q", "c", "--by", "-1000")
    fails(dsn, Exit.NOT_FOUND, "consumer", "seek", "q", "nobody", "--to", "latest")
    r = fails(dsn, Exit.NOT_FOUND, "consumer", "seek", "Q", "c", "--to", "latest")
    assert 'did you mean "q"' in r.stderr


# -- boundaries (docs/reliability/attacks-counts.md) -----------------------------------------


@pytest.mark.parametrize("pos", ["0", "9223372036854775807", "9223372036854775808", "9" * 40, "1" * 200_000])
def test_a_tick_id_of_any_length_is_not_kept_never_an_overflow(client: pglogq.Client, loaded: Any, pos: str) -> None:
    """A digit string is a tick id whatever its length: beyond the kept ticks it is PQ017 (it was
    PQ019 "invalid seek position" from 19 digits on)."""
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", to=pos)
    assert client.seek_plan("q", "c", to="0002").target_tick == 2


@pytest.mark.parametrize(("pos", "error"), [
    ("-1", pglogq.InvalidArgument), ("294277-01-01", pglogq.InvalidArgument),
    ("100000000 years ago", pglogq.InvalidArgument), ("", pglogq.InvalidArgument),
])
def test_far_timestamps_and_odd_positions_are_refused_clearly(
    client: pglogq.Client, loaded: Any, pos: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        client.seek("q", "c", to=pos)
    # nothing was sent before tick 1: a (finite) time before it is tick 1
    assert client.seek_plan("q", "c", to="epoch").target_tick == 1


@pytest.mark.parametrize("pos", ["infinity", "-infinity", " +Infinity ", "infinity ago", "-infinity ago"])
def test_a_time_that_is_not_finite_is_refused(client: pglogq.Client, loaded: Any, dsn: str, pos: str) -> None:
    """'infinity' parses as a timestamp: it was taken as the latest tick ('-infinity' as the
    earliest), silently; it is PQ019 now, for seek and seek_plan, and the cursor stays."""
    for call in (client.seek_plan, client.seek):
        with pytest.raises(pglogq.InvalidArgument) as e:
            call("q", "c", to=pos)
        assert e.value.sqlstate == "PQ019"
    assert client.seek_plan("q", "c", to="latest").current_tick == 4
    for execute in ((), ("--execute",)):
        r = run(dsn, "consumer", "seek", "q", "c", "--to", pos, *execute)
        assert r.exit_code == Exit.USAGE and "is not a finite time" in r.stderr, (r.exit_code, r.stderr)


def test_by_zero_moves_no_event(client: pglogq.Client, loaded: Any) -> None:
    client.tick("q", force=True)  # an empty tick after the consumer's position
    plan = client.seek("q", "c", by_events=0)
    assert plan.delta_events == 0 and plan.target_tick == 5
    assert drain(client) == []


def test_seek_never_writes_a_null_cursor(client: pglogq.Client, loaded: Any, dsn: str) -> None:
    """retain_tick past the last tick (nothing to land on): PQ017, and the cursor is unchanged."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.queue SET retain_tick = 1000")
        for kw in ({"to": "earliest"}, {"by_events": -1}, {"to": "15 minutes ago"}):
            with pytest.raises(pglogq.SeekOutOfRange):
                client.seek("q", "c", **kw)
        row = conn.execute("SELECT last_tick FROM pglogq.subscription WHERE consumer_name = 'c'").fetchone()
        assert row is not None and row[0] == 4


def test_seek_names_of_another_queue_or_null(client: pglogq.Client, loaded: Any, dsn: str) -> None:
    client.create_queue("other")
    client.subscribe("other", "d")
    with pytest.raises(pglogq.UnknownConsumer):
        client.seek_plan("q", "d", to="earliest")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for args, code in (((None, "c"), "PQ001"), (("q", None), "PQ002")):
            with pytest.raises(psycopg.Error) as info:
                conn.execute("SELECT * FROM pglogq.seek(%s, %s, 'latest')", args)
            assert info.value.sqlstate == code
    # a tick id of the other queue is not a tick of this one
    for _ in range(6):
        client.tick("other", force=True)
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", to=7)
