"""Sharding through SQL: the shard map, moves of slots, the moved answer of keyed sends,
the fences and the gates.  A cluster here is several databases of one server (``new_db``)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pglogq
from pglogq.cluster import cluster_admin
from pglogq.keys import key_slot
from tests.support.db import is_superuser
from tests.support.waiting import wait_for

Conn = psycopg.Connection[Any]


def key_in(lo: int, hi: int) -> str:
    """A key whose slot lies in lo..hi."""
    for i in range(1_000_000):
        k = f"k{i}"
        if lo <= key_slot(k) <= hi:
            return k
    raise AssertionError("no key found")


def fails(conn: Conn, code: str, sql: str, params: Any = ()) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(sql, params)
    assert exc.value.sqlstate == code, (exc.value.sqlstate, str(exc.value))
    return exc.value


def one(conn: Conn, sql: str, params: Any = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def wait_until_blocked_by(conn: Conn, pid: int) -> None:
    """Wait until some session waits for an advisory lock that session ``pid`` holds."""
    wait_for(lambda: one(conn, "SELECT count(*) FROM pg_locks w JOIN pg_locks h ON h.locktype = w.locktype"
                               " AND h.objid = w.objid AND h.classid = w.classid AND h.granted"
                               " WHERE NOT w.granted AND w.locktype = 'advisory' AND h.pid = %s", (pid,)) > 0,
             timeout=10)


def two_map(version: int = 1) -> dict[str, Any]:
    return {"version": version, "shards": [{"name": "a", "dsn": "dbname=a"}, {"name": "b", "dsn": "dbname=b"}],
            "ranges": [{"lo": 0, "hi": 8191, "shard": "a"}, {"lo": 8192, "hi": 16383, "shard": "b"}]}


@pytest.fixture
def pair(new_db: Callable[[], str]) -> Iterator[tuple[Conn, Conn]]:
    """Two shards a (slots 0-8191) and b (8192-16383) of cluster "c1", each with queue q and
    consumer c (subscribed before the join: the join marks the queue sharded)."""
    dsns = [new_db(), new_db()]
    conns = [psycopg.connect(d, autocommit=True) for d in dsns]
    for conn in conns:
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
    cluster_admin.init(dsns, ["a", "b"], cluster_name="c1")
    yield conns[0], conns[1]
    for conn in conns:
        conn.close()


def move(lo: int, hi: int, src: str, dst: str, version: int = 2, move_id: int | None = None) -> Jsonb:
    return Jsonb({"move_id": move_id or version, "map_version": version, "slot_lo": lo, "slot_hi": hi,
                  "from_shard": src, "to_shard": dst})


def full_move(a: Conn, b: Conn, lo: int, hi: int, version: int = 2) -> dict[str, int]:
    """Slots lo..hi from a to b, every step."""
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(lo, hi, "a", "b", version),))
    assert one(a, "SELECT pglogq.cluster_export(%s)", (move(lo, hi, "a", "b", version),))
    fences = one(a, "SELECT pglogq.cluster_fence(%s)", (version,))
    assert one(b, "SELECT pglogq.cluster_finish_move(%s, %s)", (version, Jsonb(fences)))
    assert one(a, "SELECT pglogq.cluster_finish_move(%s, NULL)", (version,))
    return dict(fences)


# -- membership and the map ----------------------------------------------------------------------


def test_join_gives_every_shard_the_map_and_marks_queues_sharded(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    for conn, me in ((a, "a"), (b, "b")):
        m = one(conn, "SELECT pglogq.cluster_map()")
        assert m["cluster"] == "c1" and m["self"] == me and m["version"] == 1 and m["slot_count"] == 16384
        assert [s["name"] for s in m["shards"]] == ["a", "b"]
        assert m["ranges"] == [{"lo": 0, "hi": 8191, "shard": "a"}, {"lo": 8192, "hi": 16383, "shard": "b"}]
        assert m["moves"] == []
        assert one(conn, "SELECT sharded FROM pglogq.queue WHERE queue_name = 'q'") is True
        conn.execute("SELECT pglogq.create_queue('later')")
        assert one(conn, "SELECT sharded FROM pglogq.queue WHERE queue_name = 'later'") is True
    # the same join again changes nothing; another name or cluster is refused
    cmap = one(a, "SELECT pglogq.cluster_map()")
    assert one(a, "SELECT pglogq.cluster_join('c1', 'a', %s)", (Jsonb(cmap),)) is False
    fails(a, "PQ081", "SELECT pglogq.cluster_join('c2', 'a', %s)", (Jsonb(cmap | {"cluster": "c2"}),))
    fails(a, "PQ081", "SELECT pglogq.cluster_join('c1', 'b', %s)", (Jsonb(cmap),))
    # leaving: no queue is sharded, the map is gone
    assert one(a, "SELECT pglogq.cluster_leave()") is True
    assert one(a, "SELECT count(*) FROM pglogq.queue WHERE sharded") == 0
    fails(a, "PQ082", "SELECT pglogq.cluster_map()")
    assert one(a, "SELECT pglogq.cluster_leave()") is False


def test_a_non_member_refuses_every_cluster_function_and_routes_nothing(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        for sql, params in [
            ("SELECT pglogq.cluster_map()", ()),
            ("SELECT pglogq.cluster_apply(%s)", (Jsonb(two_map()),)),
            ("SELECT pglogq.cluster_import(%s)", (move(0, 1, "a", "b"),)),
            ("SELECT pglogq.cluster_export(%s)", (move(0, 1, "a", "b"),)),
            ("SELECT pglogq.cluster_fence(2)", ()),
            ("SELECT pglogq.cluster_finish_move(2, '{}')", ()),
            ("SELECT pglogq.cluster_fence_passed('q', 'c', 1)", ()),
            ("SELECT pglogq.cluster_gate_pass('q', 'c', 2)", ()),
        ]:
            fails(conn, "PQ082", sql, params)
        assert one(conn, "SELECT pglogq.cluster_leave()") is False
        assert one(conn, "SELECT sharded FROM pglogq.queue") is False
        # every key is sent here
        for i in range(20):
            conn.execute("SELECT pglogq.send_keyed('q', '{}', %s)", (f"k{i}",))


GOOD = two_map()
BAD_MAPS: list[Any] = [
    None, "[]", '"x"', {"version": 1}, {"version": 1, "shards": [], "ranges": []},
    GOOD | {"version": 0}, GOOD | {"version": "1"}, GOOD | {"version": 1.5},
    {k: v for k, v in GOOD.items() if k != "version"},
    GOOD | {"ranges": [{"lo": 0, "hi": 8190, "shard": "a"}, {"lo": 8192, "hi": 16383, "shard": "b"}]},  # hole
    GOOD | {"ranges": [{"lo": 0, "hi": 8192, "shard": "a"}, {"lo": 8192, "hi": 16383, "shard": "b"}]},  # overlap
    GOOD | {"ranges": [{"lo": 0, "hi": 8191, "shard": "a"}, {"lo": 8192, "hi": 16384, "shard": "b"}]},  # beyond
    GOOD | {"ranges": [{"lo": -1, "hi": 8191, "shard": "a"}, {"lo": 8192, "hi": 16383, "shard": "b"}]},
    GOOD | {"ranges": [{"lo": 0, "hi": 8191, "shard": "a"}, {"lo": 8192, "hi": 16383, "shard": "x"}]},  # unknown
    GOOD | {"ranges": [{"lo": 0, "hi": 8191, "shard": "a"}]},  # slots left over at the end
    GOOD | {"ranges": [{"lo": 0, "hi": 16383, "shard": "a"}, {"lo": 5, "hi": 4, "shard": "b"}]},  # lo > hi
    GOOD | {"ranges": [{"lo": 0, "hi": 16383}]},
    GOOD | {"ranges": [{"lo": 0, "hi": 16383, "shard": None}]},
    GOOD | {"shards": [{"name": "a", "dsn": "dbname=a"}, {"name": "a", "dsn": "dbname=b"}]},  # repeated
    GOOD | {"shards": [{"name": "a", "dsn": "dbname=a password=secret"}, {"name": "b", "dsn": "dbname=b"}]},
    GOOD | {"shards": [{"name": "a", "dsn": "postgresql://u:secret@h/db"}, {"name": "b", "dsn": "dbname=b"}]},
    GOOD | {"shards": [{"name": "a", "dsn": ""}, {"name": "b", "dsn": "dbname=b"}]},
    GOOD | {"shards": [{"name": "a", "dsn": None}, {"name": "b", "dsn": "dbname=b"}]},
    GOOD | {"shards": [{"name": "1a", "dsn": "x"}, {"name": "b", "dsn": "dbname=b"}]},
    GOOD | {"slot_count": 100},
    GOOD | {"cluster": "other"},
]


@pytest.mark.parametrize("bad", BAD_MAPS)
def test_invalid_maps_are_refused_and_change_nothing(new_db: Callable[[], str], bad: Any) -> None:
    with psycopg.connect(new_db(), autocommit=True) as conn:
        param = Jsonb(bad) if isinstance(bad, dict) else bad
        fails(conn, "PQ081", "SELECT pglogq.cluster_join('c1', 'a', %s::jsonb)", (param,))
        fails(conn, "PQ082", "SELECT pglogq.cluster_map()")
        # a member's cluster_apply refuses them too (with a newer version)
        conn.execute("SELECT pglogq.cluster_join('c1', 'a', %s)", (Jsonb(GOOD),))
        if isinstance(bad, dict) and bad.get("version") == 1:
            param = Jsonb(bad | {"version": 2})
        fails(conn, "PQ081", "SELECT pglogq.cluster_apply(%s::jsonb)", (param,))
        assert one(conn, "SELECT pglogq.cluster_map()")["version"] == 1


def test_bad_names_and_a_map_without_this_shard(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        good = Jsonb(two_map())
        fails(conn, "PQ004", "SELECT pglogq.cluster_join(NULL, 'a', %s)", (good,))
        fails(conn, "PQ004", "SELECT pglogq.cluster_join('c1', NULL, %s)", (good,))
        fails(conn, "PQ004", "SELECT pglogq.cluster_join('c 1', 'a', %s)", (good,))
        fails(conn, "PQ004", "SELECT pglogq.cluster_join('c1', 'a''; --', %s)", (good,))
        fails(conn, "PQ081", "SELECT pglogq.cluster_join('c1', 'z', %s)", (good,))
        conn.execute("SELECT pglogq.cluster_join('c1', 'a', %s)", (good,))
        without = two_map(2) | {"shards": [{"name": "b", "dsn": "dbname=b"}],
                                    "ranges": [{"lo": 0, "hi": 16383, "shard": "b"}]}
        fails(conn, "PQ081", "SELECT pglogq.cluster_apply(%s)", (Jsonb(without),))


def test_apply_versions_stale_equal_and_gaps(pair: tuple[Conn, Conn]) -> None:
    a, _ = pair
    cmap = one(a, "SELECT pglogq.cluster_map()")
    bare = {k: cmap[k] for k in ("cluster", "version", "shards", "ranges")}
    assert one(a, "SELECT pglogq.cluster_apply(%s)", (Jsonb(bare),)) is False  # same version, same map
    changed = bare | {"ranges": [{"lo": 0, "hi": 99, "shard": "a"}, {"lo": 100, "hi": 16383, "shard": "b"}]}
    err = fails(a, "PQ080", "SELECT pglogq.cluster_apply(%s)", (Jsonb(changed),))  # same version, other map
    assert "1" in str(err)
    # a gap is fine: a shard catching up
    assert one(a, "SELECT pglogq.cluster_apply(%s)", (Jsonb(changed | {"version": 4}),)) is True
    assert one(a, "SELECT pglogq.cluster_map()")["version"] == 4
    err = fails(a, "PQ080", "SELECT pglogq.cluster_apply(%s)", (Jsonb(bare | {"version": 3}),))
    assert "version 3" in str(err) and "version 4" in str(err)
    # split ranges of one shard are the same map as the merged one
    split = changed | {"version": 4, "ranges": [{"lo": 0, "hi": 49, "shard": "a"}, {"lo": 50, "hi": 99, "shard": "a"},
                                                {"lo": 100, "hi": 16383, "shard": "b"}]}
    assert one(a, "SELECT pglogq.cluster_apply(%s)", (Jsonb(split),)) is False


# -- routing of keyed sends ----------------------------------------------------------------------


def test_keyed_sends_of_another_shards_slot_are_moved_unkeyed_never(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    mine, theirs = key_in(0, 8191), key_in(8192, 16383)
    assert one(a, "SELECT pglogq.send_keyed('q', '1', %s)", (mine,)) > 0
    err = fails(a, "PQ078", "SELECT pglogq.send_keyed('q', '1', %s)", (theirs,))
    detail = json.loads(err.diag.message_detail or "")
    assert detail == {"slot": key_slot(theirs), "shard": "b", "version": 1}
    assert f"slot {key_slot(theirs)}" in str(err) and '"b"' in str(err)
    fails(a, "PQ078", "SELECT pglogq.send_batch_keyed('q', '[1, 2]', ARRAY[%s, %s])", (mine, theirs))
    # the paths through _send_batch: idempotency keys, delays
    fails(a, "PQ078", "SELECT pglogq.send_batch_keyed('q', '[1]', ARRAY[%s], idempotency_keys => ARRAY['i'])",
          (theirs,))
    fails(a, "PQ078", "SELECT pglogq.send_keyed('q', '1', %s, delay => '1 hour')", (theirs,))
    assert one(b, "SELECT pglogq.send_keyed('q', '1', %s, delay => '1 hour')", (theirs,)) > 0
    # unkeyed events go anywhere
    for conn in (a, b):
        conn.execute("SELECT pglogq.send('q', '1')")
        conn.execute("SELECT pglogq.send_batch('q', ARRAY['1', '2']::jsonb[])")
        conn.execute("SELECT pglogq.send_batch_json('q', '[1, 2]')")
        conn.execute("SELECT pglogq.send_batch_keyed('q', '[1, 2]', NULL)")
    # nothing of the refused sends was stored
    assert one(a, "SELECT count(*) FROM pglogq.event WHERE ev_key IS NOT NULL") == 1


def test_a_repeatable_read_transaction_across_a_map_change_is_moved(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    mine = key_in(100, 8191)  # stays a's
    with psycopg.connect(a.info.dsn) as rr:
        rr.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        rr.execute("SELECT pglogq.send_keyed('q', '1', %s)", (mine,))  # the snapshot is taken
        rr.commit()
        rr.execute("SELECT 1")  # a new transaction, its snapshot before the move
        full_move(a, b, 0, 99)
        rr.execute("SELECT pglogq.send('q', '\"unkeyed\"')")  # never refused
        err = fails(rr, "PQ078", "SELECT pglogq.send_keyed('q', '1', %s)", (mine,))
        assert err.diag.message_hint == "retry the transaction"
        assert json.loads(err.diag.message_detail or "")["version"] == 2
        rr.rollback()
        rr.execute("SELECT pglogq.send_keyed('q', '1', %s)", (mine,))  # retried: fine
        rr.commit()
    # READ COMMITTED sees the new map at once
    a.execute("SELECT pglogq.send_keyed('q', '1', %s)", (mine,))
    fails(a, "PQ078", "SELECT pglogq.send_keyed('q', '1', %s)", (key_in(0, 99),))



def _retry_form(err: psycopg.Error) -> None:
    """``err`` is the moved answer of a snapshot older than the map: retry, no shard named."""
    moved = pglogq.errors.translate(err)
    assert isinstance(moved, pglogq.KeyMoved), moved
    assert moved.shard is None and moved.slot is None, (moved.shard, moved.slot, str(err))
    assert err.diag.message_hint == "retry the transaction", err.diag.message_hint


def test_a_repeatable_read_transaction_on_the_shard_that_gains_a_slot_is_told_to_retry(
        pair: tuple[Conn, Conn]) -> None:
    """The snapshot of a transaction on b predates a move of slots from a to b: a key of them sent
    in it is refused with the retry form, not "moved to a shard" (its snapshot still shows the
    slot as a's, and a gave it away), once the target has imported the slots and after the
    whole move made by the orchestrator (pglogq cluster move-slots)."""
    a, b = pair
    ours = key_in(8192, 16383)

    def old_transaction() -> Conn:
        rr = psycopg.connect(b.info.dsn)
        rr.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        rr.execute("SELECT pglogq.send_keyed('q', '1', %s)", (ours,))  # the snapshot is taken
        return rr

    # the import alone (the export on a not made yet)
    first = key_in(0, 99)
    with old_transaction() as rr:
        assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b", 2),))
        _retry_form(fails(rr, "PQ078", "SELECT pglogq.send_keyed('q', '2', %s)", (first,)))
        rr.rollback()
        rr.execute("SELECT pglogq.send_keyed('q', '2', %s)", (first,))  # retried: b's now
        rr.commit()
    assert one(a, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b", 2),))
    fences = one(a, "SELECT pglogq.cluster_fence(2)")
    assert one(b, "SELECT pglogq.cluster_finish_move(2, %s)", (Jsonb(fences),))
    assert one(a, "SELECT pglogq.cluster_finish_move(2, NULL)")
    b.execute("SELECT pglogq.cluster_gate_pass('q', 'c', 2)")

    # the whole move, by the orchestrator
    second = key_in(100, 199)
    with old_transaction() as rr:
        assert [mv["to_shard"] for mv in cluster_admin.move_slots(a.info.dsn, 100, 199, "b")] == ["b"]
        _retry_form(fails(rr, "PQ078", "SELECT pglogq.send_keyed('q', '3', %s)", (second,)))
        rr.rollback()
        rr.execute("SELECT pglogq.send_keyed('q', '3', %s)", (second,))
        rr.commit()
    assert one(b, "SELECT count(*) FROM pglogq.event WHERE ev_key IN (%s, %s)", (first, second)) == 2


def test_a_repeatable_read_transaction_across_an_applied_map_that_gives_this_shard_slots_retries(
        pair: tuple[Conn, Conn]) -> None:
    """cluster_apply of a map that gives b slots 0..99 is a change of b's map for a snapshot
    taken before it, as one that takes slots away is."""
    _, b = pair
    cmap = one(b, "SELECT pglogq.cluster_map()")
    ranges = [{"lo": 0, "hi": 99, "shard": "b"}, {"lo": 100, "hi": 8191, "shard": "a"},
              {"lo": 8192, "hi": 16383, "shard": "b"}]
    newer = {key: cmap[key] for key in ("cluster", "shards")} | {"version": cmap["version"] + 1, "ranges": ranges}
    with psycopg.connect(b.info.dsn) as rr:
        rr.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        rr.execute("SELECT pglogq.send_keyed('q', '1', %s)", (key_in(8192, 16383),))  # the snapshot
        assert one(b, "SELECT pglogq.cluster_apply(%s)", (Jsonb(newer),))
        _retry_form(fails(rr, "PQ078", "SELECT pglogq.send_keyed('q', '2', %s)", (key_in(0, 99),)))
        rr.rollback()
    # a map that changes other shards' slots only is no change for b's snapshots
    third = newer | {"version": newer["version"] + 1}
    with psycopg.connect(b.info.dsn) as rr:
        rr.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        rr.execute("SELECT pglogq.send_keyed('q', '1', %s)", (key_in(8192, 16383),))
        assert one(b, "SELECT pglogq.cluster_apply(%s)", (Jsonb(third),))
        rr.execute("SELECT pglogq.send_keyed('q', '3', %s)", (key_in(8192, 16383),))
        rr.commit()


# -- moves ---------------------------------------------------------------------------------------


def test_import_and_export_contracts(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    fails(b, "PQ080", "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b", 1),))  # stale
    fails(b, "PQ080", "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b", 3),))  # a gap
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (move(0, 99, "b", "a"),))  # not the target
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (move(8100, 8300, "a", "b"),))  # not all a's
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "x"),))  # unknown shard
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (move(0, 16384, "a", "b"),))
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (move(99, 0, "a", "b"),))
    fails(b, "PQ081", "SELECT pglogq.cluster_import(NULL)")
    fails(b, "PQ081", "SELECT pglogq.cluster_import('[]')")
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (Jsonb({"move_id": "x"}),))
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),)) is True
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),)) is False  # again: nothing
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (move(0, 98, "a", "b"),))  # same id, other move
    m = one(b, "SELECT pglogq.cluster_map()")
    assert m["version"] == 2 and m["ranges"][0] == {"lo": 0, "hi": 99, "shard": "b"}
    assert [(x["move_id"], x["state"], x["fences"], x["gates"]) for x in m["moves"]] == [(2, "importing", None, 1)]
    # another move overlapping the unfinished one is refused
    fails(b, "PQ081", "SELECT pglogq.cluster_import(%s)", (move(50, 150, "a", "b", 3),))
    # export: only by the source, at its version + 1
    fails(a, "PQ081", "SELECT pglogq.cluster_export(%s)", (move(8192, 8200, "b", "a"),))
    fails(a, "PQ080", "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b", 3),))
    with psycopg.connect(a.info.dsn) as tx:  # fence in the export's own transaction: refused
        tx.execute("SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),))
        fails(tx, "PQ081", "SELECT pglogq.cluster_fence(2)")
        tx.rollback()
    with psycopg.connect(a.info.dsn) as tx:
        tx.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        fails(tx, "PQ014", "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),))
    assert one(a, "SELECT pglogq.cluster_map()")["version"] == 1
    assert one(a, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),)) is True
    assert one(a, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),)) is False
    fails(a, "PQ081", "SELECT pglogq.cluster_finish_move(2, NULL)")  # no fences yet
    fails(a, "PQ019", "SELECT pglogq.cluster_fence(NULL)")
    fails(a, "PQ081", "SELECT pglogq.cluster_fence(77)")
    fences = one(a, "SELECT pglogq.cluster_fence(2)")
    assert set(fences) == {"q"} and fences["q"] > 1
    assert one(a, "SELECT pglogq.cluster_fence(2)") == fences  # again: the same fences
    # finish: the target wants the fences, as an object of ticks
    for bad in (None, "[]", '{"q": "x"}', '{"q": 0}', '{"q": 1.5}'):
        fails(b, "PQ081", "SELECT pglogq.cluster_finish_move(2, %s::jsonb)", (bad,))
    fails(b, "PQ081", "SELECT pglogq.cluster_finish_move(9, '{}')")
    fails(b, "PQ019", "SELECT pglogq.cluster_finish_move(NULL, '{}')")
    assert one(b, "SELECT pglogq.cluster_finish_move(2, %s)", (Jsonb(fences),)) is True
    assert one(b, "SELECT pglogq.cluster_finish_move(2, %s)", (Jsonb(fences),)) is False
    fails(b, "PQ081", "SELECT pglogq.cluster_finish_move(2, '{\"q\": 1}')")
    fails(a, "PQ081", "SELECT pglogq.cluster_finish_move(2, '{\"q\": 1}')")  # not the recorded fences
    assert one(a, "SELECT pglogq.cluster_finish_move(2, %s)", (Jsonb(fences),)) is True
    assert one(a, "SELECT pglogq.cluster_map()")["moves"] == []
    assert [x["state"] for x in one(b, "SELECT pglogq.cluster_map()")["moves"]] == ["done"]  # a gate left
    assert one(a, "SELECT pglogq.cluster_map()")["ranges"] == one(b, "SELECT pglogq.cluster_map()")["ranges"]


def test_the_export_waits_for_a_sending_transaction_and_its_event_is_before_the_fence(
        pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    k = key_in(0, 99)
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    sender = psycopg.connect(a.info.dsn)
    sender.execute("SELECT pglogq.send_keyed('q', '\"early\"', %s)", (k,))  # not committed
    pid = one(sender, "SELECT pg_backend_pid()")
    done: list[Any] = []

    def export() -> None:
        with psycopg.connect(a.info.dsn, autocommit=True) as conn:
            done.append(one(conn, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),)))

    t = threading.Thread(target=export)
    t.start()
    # the export waits for the sender's lock (an advisory lock held by pid)
    wait_until_blocked_by(a, pid)
    assert done == []
    sender.commit()
    t.join(10)
    assert done == [True]
    fences = one(a, "SELECT pglogq.cluster_fence(2)")
    # after the export: refused here
    fails(a, "PQ078", "SELECT pglogq.send_keyed('q', '\"late\"', %s)", (k,))
    sender.close()
    # the early event is in a batch at or before the fence
    rows = a.execute("SELECT msg_id, payload, batch_id FROM pglogq.receive('q', 'c', 100)").fetchall()
    assert [r[1] for r in rows] == ["early"]
    assert one(a, "SELECT batch_cur_tick FROM pglogq.subscription WHERE consumer_name = 'c'") <= fences["q"]


def test_receive_is_gated_until_the_fence_is_passed(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    k = key_in(0, 99)
    a.execute("SELECT pglogq.send_keyed('q', '\"old\"', %s)", (k,))
    b.execute("SELECT pglogq.subscribe('q', 'before')")
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    b.execute("SELECT pglogq.subscribe('q', 'during')")  # an import is unfinished: gated too
    for consumer in ("c", "before", "during"):
        err = fails(b, "PQ079", "SELECT * FROM pglogq.receive('q', %s)", (consumer,))
        assert json.loads(err.diag.message_detail or "") == {"move_id": 2, "from_shard": "a", "fence": None}
    fails(b, "PQ079", "SELECT pglogq.cluster_gate_pass('q', 'c', 2)")  # no fence yet
    a.execute("SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),))
    fences = one(a, "SELECT pglogq.cluster_fence(2)")
    b.execute("SELECT pglogq.cluster_finish_move(2, %s)", (Jsonb(fences),))
    b.execute("SELECT pglogq.subscribe('q', 'after')")  # the move is done: not gated
    assert b.execute("SELECT * FROM pglogq.receive('q', 'after')").fetchall() == []
    b.execute("SELECT pglogq.send_keyed('q', '\"new\"', %s)", (k,))
    b.execute("SELECT pglogq.force_tick('q')")
    err = fails(b, "PQ079", "SELECT * FROM pglogq.receive('q', 'c', worker_name => 'w1')")
    assert json.loads(err.diag.message_detail or "") == {"move_id": 2, "from_shard": "a", "fence": fences["q"]}
    # the consumer has not passed the fence on a
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False
    rows = a.execute("SELECT batch_id, payload FROM pglogq.receive('q', 'c')").fetchall()
    assert [r[1] for r in rows] == ["old"]
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False  # batch open
    a.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
    assert a.execute("SELECT * FROM pglogq.receive('q', 'c')").fetchall() == []
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is True
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', 0)") is True
    # still gated until the gate is passed; then the new event comes
    fails(b, "PQ079", "SELECT * FROM pglogq.receive('q', 'c')")
    assert one(b, "SELECT pglogq.cluster_gate_pass('q', 'c', 2)") is True
    assert one(b, "SELECT pglogq.cluster_gate_pass('q', 'c', 2)") is False
    assert [r[0] for r in b.execute("SELECT payload FROM pglogq.receive('q', 'c')").fetchall()] == ["new"]
    fails(b, "PQ079", "SELECT * FROM pglogq.receive('q', 'before')")  # each consumer its own gate
    # bad input
    fails(b, "PQ081", "SELECT pglogq.cluster_gate_pass('q', 'c', 99)")
    fails(b, "PQ019", "SELECT pglogq.cluster_gate_pass('q', 'c', NULL)")
    fails(b, "PQ001", "SELECT pglogq.cluster_gate_pass('nope', 'c', 2)")
    fails(b, "PQ002", "SELECT pglogq.cluster_gate_pass('q', 'nope', 2)")
    fails(a, "PQ019", "SELECT pglogq.cluster_fence_passed('q', 'c', NULL)")
    fails(a, "PQ019", "SELECT pglogq.cluster_fence_passed('q', 'c', -1)")
    fails(a, "PQ001", "SELECT pglogq.cluster_fence_passed(NULL, 'c', 1)")
    fails(a, "PQ002", "SELECT pglogq.cluster_fence_passed('q', NULL, 1)")


def test_fence_passed_waits_for_every_lease_of_a_share_consumer(pair: tuple[Conn, Conn]) -> None:
    # a share consumer's leases are open batches of its workers: a move's fence is passed only
    # once each lease of the old shard ended (acknowledged), and the new shard's workers are
    # gated until then, so a moved key's events never run on two shards at once
    a, b = pair
    k = key_in(0, 99)
    for conn in (a, b):
        conn.execute("SELECT pglogq.subscribe('q', 's', share => true)")
    for p in ("one", "two"):
        a.execute("SELECT pglogq.send_keyed('q', %s, %s)", (Jsonb(p), k))
    a.execute("SELECT pglogq.force_tick('q')")
    first = a.execute("SELECT batch_id, payload FROM pglogq.receive('q', 's', 1, worker_name => 'w1')").fetchall()
    assert [r[1] for r in first] == ["one"]
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    assert one(a, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),))
    fences = one(a, "SELECT pglogq.cluster_fence(2)")
    assert one(b, "SELECT pglogq.cluster_finish_move(2, %s)", (Jsonb(fences),))
    b.execute("SELECT pglogq.send_keyed('q', '\"new\"', %s)", (k,))
    b.execute("SELECT pglogq.force_tick('q')")
    fails(b, "PQ079", "SELECT * FROM pglogq.receive('q', 's', worker_name => 'w3')")
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 's', %s)", (fences["q"],)) is False
    second = a.execute("SELECT batch_id, payload FROM pglogq.receive('q', 's', 10, worker_name => 'w2')").fetchall()
    assert [r[1] for r in second] == ["two"]
    a.execute("SELECT pglogq.ack(%s)", (second[0][0],))
    assert a.execute("SELECT * FROM pglogq.receive('q', 's', worker_name => 'w2')").fetchall() == []
    # w1's lease is still out
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 's', %s)", (fences["q"],)) is False
    a.execute("SELECT pglogq.ack(%s)", (first[0][0],))
    assert a.execute("SELECT * FROM pglogq.receive('q', 's', worker_name => 'w1')").fetchall() == []
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 's', %s)", (fences["q"],)) is True
    assert one(b, "SELECT pglogq.cluster_gate_pass('q', 's', 2)") is True
    rows = b.execute("SELECT payload FROM pglogq.receive('q', 's', worker_name => 'w3')").fetchall()
    assert [r[0] for r in rows] == ["new"]


def test_fence_passed_waits_for_a_retry_of_a_moved_key(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    k = key_in(0, 99)
    a.execute("SELECT pglogq.send_keyed('q', '\"old\"', %s)", (k,))
    a.execute("SELECT pglogq.send_keyed('q', '\"stays\"', %s)", (key_in(100, 8191),))
    fences = full_move(a, b, 0, 99)
    rows = a.execute("SELECT batch_id, msg_id, payload FROM pglogq.receive('q', 'c')").fetchall()
    assert sorted(r[2] for r in rows) == ["old", "stays"]
    batch = rows[0][0]
    old = next(r[1] for r in rows if r[2] == "old")
    a.execute("SELECT pglogq.nack(%s, %s, '0', 'boom')", (batch, old))
    a.execute("SELECT pglogq.ack(%s)", (batch,))
    assert a.execute("SELECT * FROM pglogq.receive('q', 'c')").fetchall() == []
    assert one(a, "SELECT count(*) FROM pglogq.retry") == 1
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False  # the retry waits
    # delivered again, after the fence: still not passed until it is acknowledged
    assert one(a, "SELECT pglogq.maint_pump()") == 1
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False
    a.execute("SELECT pglogq.force_tick('q')")
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False
    rows = a.execute("SELECT batch_id, payload FROM pglogq.receive('q', 'c')").fetchall()
    assert [r[1] for r in rows] == ["old"]
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False
    a.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is True


def test_fence_passed_waits_for_a_delayed_send_of_a_moved_key(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    a.execute("SELECT pglogq.send_keyed('q', '1', %s, delay => '1 hour')", (key_in(0, 99),))
    fences = full_move(a, b, 0, 99)
    assert a.execute("SELECT * FROM pglogq.receive('q', 'c')").fetchall() == []
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False
    a.execute("UPDATE pglogq.delayed SET deliver_at = now() - interval '1 second'")
    a.execute("SELECT pglogq.maint_pump()")
    a.execute("SELECT pglogq.force_tick('q')")
    rows = a.execute("SELECT batch_id FROM pglogq.receive('q', 'c')").fetchall()
    a.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
    assert a.execute("SELECT * FROM pglogq.receive('q', 'c')").fetchall() == []
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is True


def test_fence_passed_with_cooperating_workers_and_partitions(new_db: Callable[[], str]) -> None:
    dsns = [new_db(), new_db()]
    conns = [psycopg.connect(d, autocommit=True) for d in dsns]
    try:
        for conn in conns:
            conn.execute("SELECT pglogq.create_queue('p')")
            conn.execute("SELECT pglogq.set_queue_config('p', 'partitions', '4')")
            conn.execute("SELECT pglogq.subscribe('p', 'c')")
        cluster_admin.init(dsns, ["a", "b"])
        a, b = conns
        keys = [key_in(i * 20, i * 20 + 19) for i in range(5)]
        for k in keys:
            a.execute("SELECT pglogq.send_keyed('p', '1', %s)", (k,))
        fences = full_move(a, b, 0, 99)
        pages = []
        for w in ("w1", "w2"):
            rows = a.execute("SELECT batch_id FROM pglogq.receive('p', 'c', 100, %s)", (w,)).fetchall()
            if rows:
                pages.append(rows[0][0])
        assert pages
        assert one(a, "SELECT pglogq.cluster_fence_passed('p', 'c', %s)", (fences["p"],)) is False
        for _ in range(20):
            for p in pages:
                a.execute("SELECT pglogq.ack(%s)", (p,))
            pages = [r[0] for w in ("w1", "w2")
                     for r in a.execute("SELECT batch_id FROM pglogq.receive('p', 'c', 100, %s)", (w,)).fetchall()[:1]]
            if not pages:
                break
        assert one(a, "SELECT pglogq.cluster_fence_passed('p', 'c', %s)", (fences["p"],)) is True
    finally:
        for conn in conns:
            conn.close()


def test_a_queue_dropped_or_unsubscribed_consumer_takes_its_gates_along(pair: tuple[Conn, Conn]) -> None:
    _, b = pair
    b.execute("SELECT pglogq.create_queue('q2')")
    b.execute("SELECT pglogq.subscribe('q2', 'c')")
    b.execute("SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    assert one(b, "SELECT count(*) FROM pglogq.cluster_gate") == 2
    b.execute("SELECT pglogq.drop_queue('q2', true)")
    b.execute("SELECT pglogq.unsubscribe('q', 'c')")
    assert one(b, "SELECT count(*) FROM pglogq.cluster_gate") == 0


# -- roles ---------------------------------------------------------------------------------------


def test_roles(pair: tuple[Conn, Conn]) -> None:
    a, _ = pair
    dsn = a.info.dsn
    if not is_superuser(dsn):
        pytest.skip("needs a superuser to create roles")
    made = []
    try:
        for role in ("pglogq_writer", "pglogq_reader"):
            name = f"pglogq_cl_{uuid.uuid4().hex[:10]}"
            a.execute(f'CREATE ROLE "{name}" LOGIN'.encode())
            a.execute(f'GRANT "{role}" TO "{name}"'.encode())
            made.append(name)
            with psycopg.connect(make_conninfo(dsn, user=name), autocommit=True) as conn:
                assert one(conn, "SELECT pglogq.cluster_map()")["self"] == "a"
                for sql in ("SELECT pglogq.cluster_apply('{}')", "SELECT pglogq.cluster_leave()",
                            "SELECT pglogq.cluster_import('{}')", "SELECT pglogq.cluster_export('{}')",
                            "SELECT pglogq.cluster_fence(1)", "SELECT pglogq.cluster_finish_move(1, '{}')",
                            "SELECT pglogq.cluster_join('c', 'a', '{}')"):
                    fails(conn, "42501", sql)
                if role == "pglogq_reader":
                    assert one(conn, "SELECT pglogq.cluster_fence_passed('q', 'c', 0)") is True
                    fails(conn, "PQ081", "SELECT pglogq.cluster_gate_pass('q', 'c', 5)")
                else:
                    fails(conn, "42501", "SELECT pglogq.cluster_fence_passed('q', 'c', 0)")
                    fails(conn, "42501", "SELECT pglogq.cluster_gate_pass('q', 'c', 5)")
    finally:
        for name in made:
            a.execute(f'DROP OWNED BY "{name}"'.encode())
            a.execute(f'DROP ROLE "{name}"'.encode())


def test_the_client_raises_key_moved_and_consumer_gated_with_their_fields(pair: tuple[Conn, Conn]) -> None:
    import pglogq

    a, b = pair
    theirs = key_in(8192, 16383)
    with pglogq.Client(a.info.dsn) as client:
        with pytest.raises(pglogq.KeyMoved) as moved:
            client.send("q", {"n": 1}, key=theirs)
        assert (moved.value.slot, moved.value.shard, moved.value.version) == (key_slot(theirs), "b", 1)
        assert moved.value.sqlstate == "PQ078" and moved.value.detail
        assert isinstance(pglogq.errors.translate(_error(a, "SELECT pglogq.cluster_apply('{}')")),
                          pglogq.InvalidShardMap)
    b.execute("SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    with pglogq.Client(b.info.dsn) as client, pytest.raises(pglogq.ConsumerGated) as gated:
        client.receive("q", "c")
    assert (gated.value.move_id, gated.value.from_shard, gated.value.fence) == (2, "a", None)
    for code, cls in [("PQ080", pglogq.StaleShardMap), ("PQ082", pglogq.NotAClusterMember),
                      ("PQ083", pglogq.ShardUnavailable)]:
        assert pglogq.errors.BY_SQLSTATE[code] is cls


def _error(conn: Conn, sql: str) -> psycopg.Error:
    try:
        conn.execute(sql)
    except psycopg.Error as exc:
        return exc
    raise AssertionError(f"{sql} did not fail")


@pytest.mark.parametrize("isolation", [psycopg.IsolationLevel.READ_COMMITTED, psycopg.IsolationLevel.REPEATABLE_READ])
def test_every_event_of_the_moved_slots_stored_on_the_source_is_within_its_fence(
        pair: tuple[Conn, Conn], isolation: psycopg.IsolationLevel) -> None:
    """Senders race the export: each keyed send of a moved slot either commits on the source
    inside the fence tick's snapshot, or is refused (PQ078) - never stored after the fence."""
    a, b = pair
    keys = [key_in(i * 10, i * 10 + 9) for i in range(10)]  # slots 0..99, moved
    exported = threading.Event()
    counts = {"sent": 0, "refused": 0, "after": 0}
    lock = threading.Lock()

    def sender(n: int) -> None:
        with psycopg.connect(a.info.dsn) as conn:
            conn.isolation_level = isolation
            last = False
            while not last:
                last = exported.is_set()
                try:
                    with conn.transaction():
                        conn.execute("SELECT 1")  # the snapshot (REPEATABLE READ) before the send
                        conn.execute("SELECT pglogq.send_keyed('q', %s, %s)", (Jsonb(n), keys[n % len(keys)]))
                        conn.execute("SELECT pglogq.send_keyed('q', %s, %s)", (Jsonb(n), keys[(n + 1) % len(keys)]))
                    with lock:
                        counts["sent"] += 1
                except psycopg.Error as exc:
                    assert exc.sqlstate == "PQ078", exc
                    with lock:
                        counts["refused"] += 1
                        counts["after"] += last

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: counts["sent"] >= 20, timeout=30)
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    assert one(a, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),))
    exported.set()
    fences = one(a, "SELECT pglogq.cluster_fence(2)")
    for t in threads:
        t.join(30)
    assert counts["sent"] >= 20 and counts["after"] >= len(threads)  # each sender tried after the export
    stored, outside = a.execute(
        "SELECT count(*), count(*) FILTER (WHERE NOT pg_visible_in_snapshot(e.ev_txid, t.tick_snapshot))"
        "  FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
        "  JOIN pglogq.tick t ON t.queue_id = q.queue_id AND t.tick_id = %s"
        " WHERE q.queue_name = 'q' AND e.ev_key = ANY (%s)", (fences["q"], keys)).fetchone() or (0, 0)
    assert stored == 2 * counts["sent"] and outside == 0


# -- the rows of docs/reliability/attacks-sharding.md that had no test yet ---------------------


def test_a_join_with_an_older_map_is_refused(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    old = one(a, "SELECT pglogq.cluster_map()")
    full_move(a, b, 0, 99)
    fails(a, "PQ080", "SELECT pglogq.cluster_join('c1', 'a', %s)", (Jsonb(old),))
    assert one(a, "SELECT pglogq.cluster_map()")["version"] == 2


def test_a_gate_passed_without_checking_the_fence_is_the_clients_word(pair: tuple[Conn, Conn]) -> None:
    """The server cannot ask another server: a gate_pass is accepted once the move has a fence,
    whatever the consumer did on the old shard (the clients check cluster_fence_passed first)."""
    a, b = pair
    k = key_in(0, 99)
    a.execute("SELECT pglogq.send_keyed('q', '\"old\"', %s)", (k,))
    a.execute("SELECT pglogq.force_tick('q')")
    fences = full_move(a, b, 0, 99)
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False
    assert one(b, "SELECT pglogq.cluster_gate_pass('q', 'c', 2)") is True
    b.execute("SELECT pglogq.send_keyed('q', '\"new\"', %s)", (k,))
    b.execute("SELECT pglogq.force_tick('q')")
    assert [r[0] for r in b.execute("SELECT payload FROM pglogq.receive('q', 'c')").fetchall()] == ["new"]


def test_fence_passed_waits_for_a_replayed_dead_letter_of_a_moved_key(pair: tuple[Conn, Conn]) -> None:
    a, b = pair
    k = key_in(0, 99)
    a.execute("SELECT pglogq.set_queue_config('q', 'max_retries', '0')")
    a.execute("SELECT pglogq.send_keyed('q', '\"x\"', %s)", (k,))
    a.execute("SELECT pglogq.force_tick('q')")
    row = a.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'c')").fetchone()
    assert row is not None
    assert one(a, "SELECT pglogq.nack(%s, %s)", row) == "dead"
    a.execute("SELECT pglogq.ack(%s)", (row[0],))
    fences = full_move(a, b, 0, 99)
    assert a.execute("SELECT * FROM pglogq.receive('q', 'c')").fetchall() == []
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is True
    dead_id = one(a, "SELECT dead_id FROM pglogq.dlq_inspect('q', 'c')")
    replayed = one(a, "SELECT pglogq.dlq_replay(%s)", (dead_id,))
    assert replayed is not None
    a.execute("SELECT pglogq.force_tick('q')")
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is False
    rows = a.execute("SELECT batch_id, payload FROM pglogq.receive('q', 'c')").fetchall()
    assert [r[1] for r in rows] == ["x"]
    a.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
    assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (fences["q"],)) is True


def test_a_shard_whose_schema_was_installed_afresh_is_no_member(pair: tuple[Conn, Conn]) -> None:
    a, _ = pair
    a.execute("DROP SCHEMA pglogq CASCADE")
    with pglogq.Client(a.info.dsn) as client:
        client.install_schema()
    fails(a, "PQ082", "SELECT pglogq.cluster_map()")
    a.execute("SELECT pglogq.create_queue('q')")
    assert one(a, "SELECT sharded FROM pglogq.queue WHERE queue_name = 'q'") is False
    a.execute("SELECT pglogq.send_keyed('q', '{}', %s)", (key_in(8192, 8300),))  # routes nothing


def test_a_move_out_of_a_shard_with_gated_consumers_is_refused_until_they_pass(pair: tuple[Conn, Conn]) -> None:
    """Slots 0-99 go a -> b while consumer c has not read a: c is gated on b.  Moving slots out
    of b now (back to a, or others) could gate c on a until it finished b, where it is gated:
    refused with GatesPending, nothing changed.  Moves out of a go on; once c passed its gates on
    b, the move back is made."""
    a, b = pair
    seed = a.info.dsn
    a.execute("SELECT pglogq.send_keyed('q', '\"old\"', %s)", (key_in(0, 99),))
    a.execute("SELECT pglogq.force_tick('q')")
    cluster_admin.move_slots(seed, 0, 99, "b")
    for lo, hi in ((0, 99), (9000, 9099)):
        with pytest.raises(pglogq.GatesPending) as info:
            cluster_admin.move_slots(seed, lo, hi, "a")
        assert info.value.sqlstate == "PQ084" and '"b"' in str(info.value)
    assert one(a, "SELECT pglogq.cluster_map()")["version"] == one(b, "SELECT pglogq.cluster_map()")["version"] == 2
    cluster_admin.move_slots(seed, 100, 199, "b")  # out of a, where nobody is gated
    rows = a.execute("SELECT batch_id, payload FROM pglogq.receive('q', 'c')").fetchall()
    assert [r[1] for r in rows] == ["old"]
    a.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
    assert a.execute("SELECT * FROM pglogq.receive('q', 'c')").fetchall() == []
    for m in one(b, "SELECT pglogq.cluster_map()")["moves"]:
        assert one(a, "SELECT pglogq.cluster_fence_passed('q', 'c', %s)", (m["fences"]["q"],)) is True
        assert one(b, "SELECT pglogq.cluster_gate_pass('q', 'c', %s)", (m["move_id"],)) is True
    assert [mv["to_shard"] for mv in cluster_admin.move_slots(seed, 0, 99, "a")] == ["a"]


# -- a map or an export while sends are in flight --------------------------------------------------


def test_apply_of_a_map_taking_slots_away_waits_for_a_send_of_them(pair: tuple[Conn, Conn]) -> None:
    """cluster_apply that takes slots 0..99 from a waits for a's transaction sending a key of
    them; the event is stored on a before the map changes, and the next keyed send is moved."""
    a, _ = pair
    k = key_in(0, 99)
    cmap = one(a, "SELECT pglogq.cluster_map()")
    ranges = [{"lo": 0, "hi": 99, "shard": "b"}, {"lo": 100, "hi": 8191, "shard": "a"},
              {"lo": 8192, "hi": 16383, "shard": "b"}]
    newer = {key: cmap[key] for key in ("cluster", "shards")} | {"version": cmap["version"] + 1, "ranges": ranges}
    sender = psycopg.connect(a.info.dsn)
    sender.execute("SELECT pglogq.send_keyed('q', '\"in flight\"', %s)", (k,))  # not committed
    pid = one(sender, "SELECT pg_backend_pid()")
    done: list[Any] = []

    def apply() -> None:
        with psycopg.connect(a.info.dsn, autocommit=True) as conn:
            done.append(one(conn, "SELECT pglogq.cluster_apply(%s)", (Jsonb(newer),)))

    t = threading.Thread(target=apply)
    t.start()
    wait_until_blocked_by(a, pid)
    assert done == [] and one(a, "SELECT pglogq.cluster_map()")["version"] == cmap["version"]
    sender.commit()
    sender.close()
    t.join(10)
    assert done == [True]
    assert one(a, "SELECT pglogq.cluster_map()")["version"] == cmap["version"] + 1
    assert one(a, "SELECT count(*) FROM pglogq.event WHERE ev_key = %s", (k,)) == 1
    fails(a, "PQ078", "SELECT pglogq.send_keyed('q', '\"after\"', %s)", (k,))
    assert one(a, "SELECT count(*) FROM pglogq.event WHERE ev_key = %s", (k,)) == 1


def test_export_against_a_transaction_sending_to_two_queues_is_a_deadlock_one_side_retries(
        new_db: Callable[[], str]) -> None:
    """A transaction sent to queue "q2" and then sends to "q1" while cluster_export holds "q1"
    (names are locked in order) and waits for "q2": PostgreSQL breaks the cycle with 40P01 on
    one side; the side that lost is retried and both end done, nothing stored twice."""
    dsns = [new_db(), new_db()]
    conns = [psycopg.connect(d, autocommit=True) for d in dsns]
    for conn in conns:
        for name in ("q1", "q2"):
            conn.execute("SELECT pglogq.create_queue(%s)", (name,))
            conn.execute("SELECT pglogq.subscribe(%s, 'c')", (name,))
    cluster_admin.init(dsns, ["a", "b"], cluster_name="c1")
    a, b = conns
    k = key_in(200, 299)
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    sender = psycopg.connect(a.info.dsn)
    sender.execute("SET deadlock_timeout = '100ms'")
    sender.execute("SELECT pglogq.send_keyed('q2', '\"first\"', %s)", (k,))
    errors: list[str] = []
    done: list[Any] = []

    def export() -> None:
        with psycopg.connect(a.info.dsn, autocommit=True) as conn:
            conn.execute("SET deadlock_timeout = '100ms'")
            try:
                done.append(one(conn, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),)))
            except psycopg.Error as exc:
                errors.append(exc.sqlstate or "")

    t = threading.Thread(target=export)
    t.start()
    pid = one(sender, "SELECT pg_backend_pid()")
    wait_until_blocked_by(a, pid)
    try:
        sender.execute("SELECT pglogq.send_keyed('q1', '\"second\"', %s)", (k,))
        sender.commit()
    except psycopg.Error as exc:
        errors.append(exc.sqlstate or "")
        sender.rollback()
    t.join(10)
    assert errors == ["40P01"], errors  # exactly one side lost
    if done:  # the sender lost: nothing of it was stored; sent again, both events are stored
        assert done == [True]
        with sender.transaction():
            sender.execute("SELECT pglogq.send_keyed('q2', '\"first\"', %s)", (k,))
            sender.execute("SELECT pglogq.send_keyed('q1', '\"second\"', %s)", (k,))
    else:  # the export lost: nothing changed; run again, it goes through
        assert one(a, "SELECT pglogq.cluster_map()")["version"] == 1
        assert one(a, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),)) is True
    sender.close()
    assert one(a, "SELECT count(*) FROM pglogq.event WHERE ev_key = %s", (k,)) == 2
    assert one(a, "SELECT pglogq.cluster_map()")["version"] == 2
    for conn in conns:
        conn.close()


def test_sends_of_one_key_to_both_shards_between_import_and_export_come_source_first(
        pair: tuple[Conn, Conn]) -> None:
    """The window between the import and the export: a producer with the old map sends key K to
    the source, one with the new map (read from the target) sends K to the target.  Both are
    stored (each shard owns K by its own map until the export); the consumer gets the source's
    events first, also one committed after the target's, because the target's waits behind the
    gate until the consumer passed the source's fence."""
    a, b = pair
    k = key_in(0, 99)
    a.execute("SELECT pglogq.send_keyed('q', '\"src-1\"', %s)", (k,))
    assert one(b, "SELECT pglogq.cluster_import(%s)", (move(0, 99, "a", "b"),))
    b.execute("SELECT pglogq.send_keyed('q', '\"dst\"', %s)", (k,))  # committed first ...
    a.execute("SELECT pglogq.send_keyed('q', '\"src-2\"', %s)", (k,))  # ... the source's after it
    assert one(a, "SELECT pglogq.cluster_export(%s)", (move(0, 99, "a", "b"),))
    fails(a, "PQ078", "SELECT pglogq.send_keyed('q', '\"late\"', %s)", (k,))  # the export ends the window
    fences = one(a, "SELECT pglogq.cluster_fence(2)")
    assert one(b, "SELECT pglogq.cluster_finish_move(2, %s)", (Jsonb(fences),))
    assert one(a, "SELECT pglogq.cluster_finish_move(2, NULL)")
    for conn in (a, b):
        conn.execute("SELECT pglogq.force_tick('q')")
    fails(b, "PQ079", "SELECT * FROM pglogq.receive('q', 'c')")  # the target's event waits
    got: list[str] = []
    with pglogq.ShardedClient([make_conninfo(a.info.dsn)]) as sc:
        for _ in range(10):
            batch = sc.receive("q", "c", max_messages=100)
            got += [m.payload for m in batch]
            if batch:
                assert batch.ack()
            if len(got) == 3:
                break
    assert got == ["src-1", "src-2", "dst"]
