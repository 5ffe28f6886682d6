"""The shard map of a cluster as the clients read it: parsing ``cluster_map()``'s
jsonb, slot and key lookups, unfinished moves, and the DSN credentials merge (no I/O)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

import pglogq
from pglogq.cluster import _sharding
from pglogq.cluster.shardmap import ShardMap, redacted, shard_dsn
from pglogq.models import ConsumerInfo


def doc(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cluster": "c1",
        "self": "a",
        "version": 3,
        "slot_count": 16384,
        "shards": [{"name": "a", "dsn": "host=h1 port=5432 dbname=q1"},
                   {"name": "b", "dsn": "postgresql://h2:5433/q2"},
                   {"name": "c", "dsn": "host=h3 dbname=q3 user=other"}],
        "ranges": [{"lo": 5462, "hi": 10922, "shard": "b"}, {"lo": 0, "hi": 5461, "shard": "a"},
                   {"lo": 10923, "hi": 16383, "shard": "c"}],
        "moves": [{"move_id": 7, "map_version": 4, "slot_lo": 100, "slot_hi": 199, "from_shard": "a",
                   "to_shard": "b", "state": "exported", "fences": {"orders": 12}}],
    }
    base.update(over)
    return base


def test_parse_and_look_up() -> None:
    m = ShardMap.from_json(doc())
    assert (m.cluster, m.version, m.source, m.slot_count) == ("c1", 3, "a", 16384)
    assert m.shard_names == ("a", "b", "c")
    assert [(r.lo, r.hi, r.shard) for r in m.ranges] == [(0, 5461, "a"), (5462, 10922, "b"), (10923, 16383, "c")]
    for slot, shard in ((0, "a"), (5461, "a"), (5462, "b"), (10922, "b"), (10923, "c"), (16383, "c")):
        assert m.shard_for_slot(slot) == shard
    for bad in (-1, 16384, True, "3"):
        with pytest.raises(ValueError):
            m.shard_for_slot(bad)  # type: ignore[arg-type]
    assert m.slots_of("b") == [(5462, 10922)]
    # the same answer as JSON text, and as the bytes psycopg may hand over
    assert ShardMap.from_json(json.dumps(doc())) == m
    assert ShardMap.from_json(json.dumps(doc()).encode()) == m
    with pytest.raises(KeyError):
        m.dsn("nope")


def test_shard_for_key_follows_key_slot() -> None:
    m = ShardMap.from_json(doc())
    rng = random.Random(15)
    for _ in range(500):
        key = "".join(rng.choice("abcxyz0123-é") for _ in range(rng.randint(1, 12)))
        slot = pglogq.key_slot(key)
        expect = "a" if slot <= 5461 else "b" if slot <= 10922 else "c"
        assert m.shard_for_key(key) == expect


def test_unfinished_moves() -> None:
    m = ShardMap.from_json(doc())
    (mv,) = m.moves
    assert (mv.move_id, mv.version, mv.lo, mv.hi, mv.from_shard, mv.to_shard, mv.state) == (
        7, 4, 100, 199, "a", "b", "exported")
    assert dict(mv.fences) == {"orders": 12}
    assert m.moves_into("b") == [mv] and m.moves_from("a") == [mv]
    assert m.moves_into("a") == [] and m.move(7) is mv and m.move(8) is None
    assert ShardMap.from_json(doc(moves=[])).moves == ()


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"ranges": [{"lo": 0, "hi": 100, "shard": "a"}]}, "belong to no shard"),
        ({"ranges": [{"lo": 0, "hi": 9000, "shard": "a"}, {"lo": 8000, "hi": 16383, "shard": "b"}]}, "overlap"),
        ({"ranges": [{"lo": 0, "hi": 99, "shard": "a"}, {"lo": 101, "hi": 16383, "shard": "b"}]}, "gap"),
        ({"ranges": [{"lo": 0, "hi": 16383, "shard": "z"}]}, "unknown shard 'z'"),
        ({"shards": []}, "no shard"),
        ({"version": "three"}, "invalid"),
        ({"version": None}, "integer"),
        ({"cluster": None, "shards": None}, "invalid shard map"),
    ],
)
def test_invalid_maps_are_refused(change: dict[str, Any], what: str) -> None:
    d = doc(**change)
    with pytest.raises(pglogq.InvalidShardMap) as e:
        ShardMap.from_json(d)
    assert what in str(e.value)
    bare = doc()
    del bare["ranges"]
    with pytest.raises(pglogq.InvalidShardMap, match="missing field 'ranges'"):
        ShardMap.from_json(bare)
    with pytest.raises(pglogq.InvalidShardMap):
        ShardMap.from_json("[1, 2]")


def test_the_map_is_frozen() -> None:
    m = ShardMap.from_json(doc())
    with pytest.raises(AttributeError):
        m.version = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.shards["d"] = "host=x"  # type: ignore[index]


def test_credentials_come_from_the_seed() -> None:
    seed = "postgresql://app:s3cret@seed-host:6000/seed_db?sslmode=verify-full&connect_timeout=4&application_name=shop"
    got = conninfo_to_dict(shard_dsn("host=h1 port=5432 dbname=q1", seed))
    assert got == {"host": "h1", "port": "5432", "dbname": "q1", "user": "app", "password": "s3cret",
                   "sslmode": "verify-full", "connect_timeout": "4", "application_name": "shop"}
    # the map's DSN says where (a URL too) and wins for what it sets itself
    got = conninfo_to_dict(shard_dsn("postgresql://other@h2:5433/q2?sslmode=disable", seed))
    assert got == {"host": "h2", "port": "5433", "dbname": "q2", "user": "other", "password": "s3cret",
                   "sslmode": "disable", "connect_timeout": "4", "application_name": "shop"}
    # nothing of the seed's location leaks into a shard's: no port when the map gives none
    got = conninfo_to_dict(shard_dsn("host=h3 dbname=q3", "host=seed port=7000 dbname=x user=u"))
    assert got == {"host": "h3", "dbname": "q3", "user": "u"}
    got = conninfo_to_dict(shard_dsn("service=shard4", "host=seed hostaddr=10.0.0.1 password=pw"))
    assert got == {"service": "shard4", "password": "pw"}
    m = ShardMap.from_json(doc())
    assert conninfo_to_dict(m.dsn("c", seed))["user"] == "other"
    assert m.dsn("a") == "host=h1 port=5432 dbname=q1"


def test_redacted_hides_the_password() -> None:
    assert "s3cret" not in redacted("postgresql://app:s3cret@h/db")
    assert conninfo_to_dict(redacted("postgresql://app:s3cret@h/db")) == {"user": "app", "host": "h", "dbname": "db"}
    assert redacted("not a dsn = = =") == "<unparsable DSN>"


def test_a_shard_that_fails_is_left_alone_longer_each_time() -> None:
    now = [100.0]
    down = _sharding.DownShards(clock=lambda: now[0])
    assert not down.is_down("a")
    waits = [down.failed("a") for _ in range(7)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]  # doubling, at most DOWN_MAX
    assert down.is_down("a") and not down.is_down("b") and down.known_down() == ["a"]
    now[0] += 30.0
    assert not down.is_down("a")  # tried again after its wait
    down.failed("a")
    down.answered("a")
    assert not down.is_down("a") and down.failed("a") == 1.0  # an answer resets the count


def test_which_errors_say_a_shard_is_unreachable() -> None:
    assert _sharding.unreachable(PoolTimeout("no connection in 5 s"))
    assert _sharding.unreachable(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert _sharding.unreachable(psycopg.errors.AdminShutdown("terminating connection"))
    assert _sharding.unreachable(psycopg.errors.InvalidCatalogName("database does not exist"))
    assert _sharding.unreachable(ConnectionRefusedError())
    assert not _sharding.unreachable(psycopg.errors.QueryCanceled("statement timeout"))
    assert not _sharding.unreachable(psycopg.errors.UniqueViolation("dup"))
    assert not _sharding.unreachable(pglogq.UnknownQueue("unknown queue"))


def test_rows_of_the_shards_combine() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def row(consumer: str, lag: int, events: int | None, pending: int | None, batch: int | None,
            seen: datetime | None) -> ConsumerInfo:
        return ConsumerInfo("q", consumer, 7, timedelta(seconds=lag), events, pending, seen, batch,
                            seen, 2, 1 if batch else 0, 3, 1, 0, None)

    rows: dict[str, ConsumerInfo | None] = {
        "a": row("c", 5, 10, 4, 11, t0), "b": row("c", 9, None, 6, None, t0 + timedelta(seconds=3)), "c": None,
    }
    got = _sharding.combine_consumer_info("q", "c", rows)
    assert (got.lag, got.lag_events, got.pending_events, got.batch_id) == (timedelta(seconds=9), 10, 10, 11)
    assert (got.last_seen, got.batch_open_since, got.workers, got.open_batches) == (
        t0 + timedelta(seconds=3), t0, 2, 1)
    assert (got.retry_depth, got.dead_letters, got.unavailable) == (6, 2, ["c"])
    assert got.shards == rows
    rows["c"] = row("c", 1, 1, 1, 12, t0)
    assert _sharding.combine_consumer_info("q", "c", rows).batch_id is None  # per shard: see shards
