"""The sharded client on a cluster of three shards (databases of the test server), on
ShardedClient and AsyncShardedClient: routing by slot, the moved answer, the caller's connection,
send_batch per shard, receive and ack across shards, combined monitoring, a shard that is down."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

import pglogq
from pglogq.cluster import cluster_admin
from tests.plugins.database import SyncOverAsync
from tests.support.cluster import Cluster, make_cluster
from tests.support.db import state
from tests.support.waiting import wait_for


@pytest.fixture
def cluster(new_db: Callable[[], str], server_dsn: str) -> Cluster:
    return make_cluster(new_db, server_dsn, 3)


@pytest.fixture(params=["sync", "async"])
def sapi(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Any]:
    """The sharded client on the cluster's first shard as its only seed: ShardedClient, then
    AsyncShardedClient driven synchronously."""
    if request.param == "sync":
        c = pglogq.ShardedClient(cluster.seeds[:1], shard_timeout=2.0)
        yield c
        c.close()
        return
    loop = asyncio.new_event_loop()
    ac = pglogq.AsyncShardedClient(cluster.seeds[:1], shard_timeout=2.0)
    yield SyncOverAsync(ac, loop)
    loop.run_until_complete(ac.close())
    loop.close()


def raw(batch: Any) -> Any:
    """The batch itself (the async client's is wrapped to be driven synchronously)."""
    return batch._target if isinstance(batch, SyncOverAsync) else batch


def setup_queue(sapi: Any, *consumers: str) -> None:
    assert sapi.create_queue("q") is True
    assert sapi.create_queue("q") is False
    for c in consumers or ("c",):
        assert sapi.subscribe("q", c) is True


def test_keyed_sends_go_where_the_map_says(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    keys = [f"key-{i}" for i in range(60)]
    for k in keys:
        sapi.send("q", {"k": k}, key=k)
    m = cluster.read_map()
    assert sapi.map.version == m.version == 1 and sapi.map.shard_names == tuple(cluster.names)
    for name in cluster.names:
        stored = [k for k, _ in cluster.events(name, "q")]
        mine = [k for k in keys if m.shard_for_key(k) == name]
        assert stored == mine and mine, name
        # the server's own rule agrees: the slot of each key is in one of this shard's ranges
        with psycopg.connect(cluster.dsns[name]) as conn:
            for k in mine:
                row = conn.execute("SELECT shard_name FROM pglogq.cluster_slots"
                                   " WHERE pglogq.key_slot(%s) BETWEEN slot_lo AND slot_hi", (k,)).fetchone()
                assert row == (name,)
        dsn = sapi.shard_for("q", mine[0])
        assert conninfo_to_dict(dsn)["dbname"] == cluster.dbname(name)


def test_unkeyed_sends_take_the_shards_in_turn(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    for i in range(6):
        sapi.send("q", {"n": i})
    assert [len(cluster.events(n, "q")) for n in cluster.names] == [2, 2, 2]
    ids = sapi.send_batch("q", [{"b": i} for i in range(5)])
    assert len(ids) == 5
    counts = sorted(len(cluster.events(n, "q")) for n in cluster.names)
    assert counts == [2, 2, 7]  # one batch, one shard, one transaction
    # an idempotency key picks the shard of its slot: a retry meets the first attempt
    first = sapi.send("q", {"once": 1}, idempotency_key="order-77")
    again = sapi.send("q", {"once": 1}, idempotency_key="order-77")
    assert first == again
    assert sum(len(cluster.events(n, "q")) for n in cluster.names) == 12
    batch = sapi.send_batch("q", [{"b": 1}, {"b": 2}], idempotency_keys=["batch-5-1", "batch-5-2"])
    assert sapi.send_batch("q", [{"b": 1}, {"b": 2}], idempotency_keys=["batch-5-1", "batch-5-2"]) == batch
    assert sum(len(cluster.events(n, "q")) for n in cluster.names) == 14


def test_a_stale_client_follows_the_moved_answer(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    key = cluster.keys_of("s0", 1)[0]
    sapi.send("q", {"n": 1}, key=key)
    assert sapi.map.version == 1
    slot = pglogq.key_slot(key)
    cluster_admin.move_slots(cluster.seeds[1], slot, slot, "s1")
    assert sapi.map.version == 1  # nothing told the client yet
    sapi.send("q", {"n": 2}, key=key)  # s0 answers "moved": the map is read again, sent to s1
    assert sapi.map.version == 2 and sapi.map.shard_for_key(key) == "s1"
    assert cluster.events("s0", "q") == [(key, {"n": 1})]
    assert cluster.events("s1", "q") == [(key, {"n": 2})]
    # the batch form too, with a fresh stale client
    stale = pglogq.ShardedClient(cluster.seeds[2:], shard_timeout=2.0)
    try:
        stale.refresh_map()
        # out of s1, where consumer c is gated by the first move: refused until c passed it
        with pytest.raises(pglogq.GatesPending):
            cluster_admin.move_slots(cluster.seeds[0], slot, slot, "s2")
        with psycopg.connect(cluster.dsns["s1"], autocommit=True) as conn:
            conn.execute("SELECT pglogq.unsubscribe('q', 'c')")  # (its gate goes with it)
        cluster_admin.move_slots(cluster.seeds[0], slot, slot, "s2")
        others = cluster.keys_of("s1", 2, prefix="other")  # in the same group as key, and staying
        ids = stale.send_batch("q", [{"n": 3}, {"n": 4}, {"n": 5}], keys=[key, *others])
        assert len(ids) == 3 and stale.map is not None and stale.map.version == 3
    finally:
        stale.close()
    assert cluster.events("s2", "q") == [(key, {"n": 3})]
    assert [p for _, p in cluster.events("s1", "q")] == [{"n": 2}, {"n": 4}, {"n": 5}]
    assert cluster.events("s0", "q") == [(key, {"n": 1})]


def test_a_client_behind_twice_gets_key_moved_and_nothing_is_stored(sapi: Any, cluster: Cluster) -> None:
    """The refusing shard's map is stale too: s0 took a map (by the operator, cluster_apply) that
    gives the key's slot to s1, while s1 still has the old one (the slot is s0's).  The client
    sends to s0 (moved: s1), reads the map again from s0, sends to s1, which says moved (s0):
    the second answer is raised to the caller, and nothing is stored anywhere."""
    setup_queue(sapi)
    key = cluster.keys_of("s0", 1)[0]
    slot = pglogq.key_slot(key)
    assert sapi.map.version == 1 and sapi.map.shard_for_key(key) == "s0"
    with psycopg.connect(cluster.dsns["s0"], autocommit=True) as conn:
        cmap = conn.execute("SELECT pglogq.cluster_map()").fetchone()
        assert cmap is not None
        ranges = [r for r in cmap[0]["ranges"] if not r["lo"] <= slot <= r["hi"]]
        for r in cmap[0]["ranges"]:  # the key's range split around its slot, the slot given to s1
            if r["lo"] <= slot <= r["hi"]:
                ranges += [x for x in ({"lo": r["lo"], "hi": slot - 1, "shard": r["shard"]},
                                       {"lo": slot + 1, "hi": r["hi"], "shard": r["shard"]}) if x["lo"] <= x["hi"]]
        ranges.append({"lo": slot, "hi": slot, "shard": "s1"})
        newer = {k: cmap[0][k] for k in ("cluster", "shards")} | {"version": 2, "ranges": ranges}
        conn.execute("SELECT pglogq.cluster_apply(%s)", (Jsonb(newer),))
    with pytest.raises(pglogq.KeyMoved) as exc:
        sapi.send("q", {"n": 1}, key=key)
    assert exc.value.shard == "s0" and exc.value.slot == slot  # s1's word: the slot is s0's
    assert sapi.map.version == 2 and sapi.map.shard_for_key(key) == "s1"
    assert all(cluster.events(name, "q") == [] for name in cluster.names)


def test_receive_passes_the_gate_of_a_move_once_the_old_shard_is_done(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    key = cluster.keys_of("s0", 1)[0]
    sapi.send("q", {"n": 1}, key=key)
    sapi.tick("q", force=True)
    slot = pglogq.key_slot(key)
    cluster_admin.move_slots(cluster.seeds[0], slot, slot, "s1")
    sapi.send("q", {"n": 2}, key=key)  # moved: to s1 now
    sapi.tick("q", force=True)
    with pglogq.Client(cluster.dsns["s1"]) as one, pytest.raises(pglogq.ConsumerGated) as e:
        one.receive("q", "c")
    assert (e.value.from_shard, e.value.fence is not None) == ("s0", True)
    first = sapi.receive("q", "c")
    assert (first.shard, [m.payload for m in first]) == ("s0", [{"n": 1}])
    # s1 is next in turn, but gated while the page of s0 is not acknowledged: s0's page again
    again = sapi.receive("q", "c")
    assert (again.shard, again.id) == ("s0", first.id)
    assert first.ack() is True
    second = sapi.receive("q", "c")  # s0 is done up to the fence: the gate is passed
    assert (second.shard, [m.payload for m in second]) == ("s1", [{"n": 2}])
    second.ack()
    with psycopg.connect(cluster.dsns["s1"]) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.cluster_gate").fetchone() == (0,)
    assert not sapi.receive("q", "c")


def test_a_consumer_the_old_shard_does_not_have_passes_its_gate(sapi: Any, cluster: Cluster) -> None:
    """Subscribed on the new shard only: it has nothing to finish on the old one (which answers
    "unknown consumer" to cluster_fence_passed), so its gate passes and the moved key comes."""
    setup_queue(sapi)
    with pglogq.Client(cluster.dsns["s1"]) as one:
        one.subscribe("q", "solo")
    key = cluster.keys_of("s0", 1)[0]
    slot = pglogq.key_slot(key)
    cluster_admin.move_slots(cluster.seeds[0], slot, slot, "s1")
    sapi.send("q", {"n": 1}, key=key)
    sapi.tick("q", force=True)
    with pglogq.Client(cluster.dsns["s1"]) as one:
        with pytest.raises(pglogq.ConsumerGated) as gated:
            one.receive("q", "solo")
        assert sapi.pass_gate("q", "solo", "s1", gated.value) is True
        got = one.receive("q", "solo")
        assert [m.payload for m in got] == [{"n": 1}]
        assert got.ack() is True


def test_send_on_the_wrong_shards_connection_raises_key_moved(cluster: Cluster) -> None:
    sapi = pglogq.ShardedClient(cluster.seeds[:1])
    try:
        _wrong_shards_connection(sapi, cluster)
    finally:
        sapi.close()


def test_async_send_on_the_wrong_shards_connection_raises_key_moved(cluster: Cluster) -> None:
    async def main() -> None:
        async with pglogq.AsyncShardedClient(cluster.seeds[:1]) as sapi:
            await sapi.create_queue("q")
            key = cluster.keys_of("s1", 1)[0]
            before = state(cluster.dsns["s0"])
            async with await psycopg.AsyncConnection.connect(cluster.dsns["s0"]) as conn:
                with pytest.raises(pglogq.KeyMoved) as e:
                    await sapi.send("q", {"n": 1}, key=key, conn=conn)
                await conn.rollback()
            assert (e.value.slot, e.value.shard, e.value.version) == (pglogq.key_slot(key), "s1", 1)
            assert state(cluster.dsns["s0"]) == before
            async with await psycopg.AsyncConnection.connect(await sapi.shard_for("q", key)) as conn:
                await sapi.send_batch("q", [{"n": 2}], keys=[key], conn=conn)
            assert cluster.events("s1", "q") == [(key, {"n": 2})]

    asyncio.run(main())


def _wrong_shards_connection(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    key = cluster.keys_of("s1", 1)[0]
    before = state(cluster.dsns["s0"])
    with psycopg.connect(cluster.dsns["s0"]) as conn:
        with pytest.raises(pglogq.KeyMoved) as e:
            sapi.send("q", {"n": 1}, key=key, conn=conn)
        conn.rollback()
        assert (e.value.slot, e.value.shard, e.value.version) == (pglogq.key_slot(key), "s1", 1)
        with pytest.raises(pglogq.KeyMoved):
            sapi.send_batch("q", [{"n": 2}, {"n": 3}], keys=[cluster.keys_of("s0", 1)[0], key], conn=conn)
        conn.rollback()
    assert state(cluster.dsns["s0"]) == before
    # on the connection of the key's shard it joins the caller's transaction
    with psycopg.connect(sapi.shard_for("q", key)) as conn:
        sapi.send("q", {"n": 4}, key=key, conn=conn)
        assert cluster.events("s1", "q") == []  # not committed yet
        conn.commit()
    assert cluster.events("s1", "q") == [(key, {"n": 4})]


def test_send_batch_is_split_per_shard(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    m = cluster.read_map()
    keys = [f"b{i % 17}" for i in range(90)]
    ids = sapi.send_batch("q", [{"i": i} for i in range(90)], keys=keys)
    assert len(ids) == 90
    for name in cluster.names:
        mine = [i for i, k in enumerate(keys) if m.shard_for_key(k) == name]
        assert [p["i"] for _, p in cluster.events(name, "q")] == mine  # in order, one shard each
        assert [ids[i] for i in mine] == sorted(ids[i] for i in mine)
    with pytest.raises(pglogq.InvalidKey):
        sapi.send_batch("q", [{"i": 1}], keys=["a", "b"])


def test_receive_and_ack_across_the_shards(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    m = cluster.read_map()
    sent: list[str] = []
    for name in cluster.names:
        for k in cluster.keys_of(name, 10, prefix=f"{name}-"):
            sapi.send("q", {"k": k}, key=k)
            sent.append(k)
    assert sapi.tick("q", force=True) == 3
    got: list[str] = []
    shards: list[str] = []
    while True:
        batch = sapi.receive("q", "c", max_messages=4)
        if not batch:
            break
        shards.append(batch.shard)
        for msg in batch:
            assert m.shard_for_key(msg.payload["k"]) == batch.shard
            got.append(msg.payload["k"])
        assert (sapi.ack(raw(batch)) if len(shards) % 2 else batch.ack()) is True
    assert sorted(got) == sorted(sent)  # each once
    assert shards[:3] == ["s0", "s1", "s2"]  # in turn while every shard has events
    assert Counter(shards) == {"s0": 3, "s1": 3, "s2": 3}
    assert batch.shard is None and batch.id is None
    # a nack goes to the batch's shard
    key = cluster.keys_of("s2", 1, prefix="again")[0]
    sapi.send("q", {"k": key}, key=key)
    sapi.tick("q", force=True)
    batch = sapi.receive("q", "c")
    assert batch.shard == "s2"
    assert sapi.nack(raw(batch), batch.messages[0], dead=True, reason="test") == "dead"
    assert batch.ack() is True
    assert sapi.consumer_info("q", "c")[0].shards["s2"].dead_letters == 1


def test_monitoring_combines_the_shards(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi, "c1", "c2")
    for n, name in zip((5, 7, 9), cluster.names, strict=True):
        keys = cluster.keys_of(name, n)
        sapi.send_batch("q", [{"k": k} for k in keys], keys=keys)
    sapi.tick("q", force=True)
    (info,) = sapi.queue_info("q")
    assert isinstance(info, pglogq.ShardedQueueInfo) and isinstance(info, pglogq.QueueInfo)
    assert set(info.shards) == set(cluster.names) and info.unavailable == []
    for name in cluster.names:
        with pglogq.Client(cluster.dsns[name]) as one:
            own = one.queue_info("q")[0]
        row = info.shards[name]
        assert row is not None and row.consumers == own.consumers == 2
        assert row.size_bytes == own.size_bytes
    assert info.consumers == 2
    assert info.size_bytes == sum(r.size_bytes for r in info.shards.values() if r is not None)
    rows = sapi.consumer_info("q")
    assert [(r.queue_name, r.consumer_name) for r in rows] == [("q", "c1"), ("q", "c2")]
    for r in rows:
        per = [r.shards[n] for n in cluster.names]
        assert all(p is not None for p in per)
        assert r.pending_events == sum(p.pending_events or 0 for p in per if p is not None)
    with cluster.down("s2"):
        (info,) = sapi.queue_info("q")
        assert info.shards["s2"] is None and info.unavailable == ["s2"]
        assert info.size_bytes == sum(r.size_bytes for r in info.shards.values() if r is not None)
        rows = sapi.consumer_info("q", "c1")
        assert rows[0].unavailable == ["s2"]


def test_a_shard_that_is_down_stops_only_its_keys(sapi: Any, cluster: Cluster) -> None:
    setup_queue(sapi)
    keys = {name: cluster.keys_of(name, 3, prefix=f"{name}-") for name in cluster.names}
    for ks in keys.values():
        sapi.send_batch("q", [{"k": k} for k in ks], keys=ks)
    sapi.tick("q", force=True)
    with cluster.down("s2"):
        before = [len(cluster.events(n, "q")) for n in ("s0", "s1")]
        with pytest.raises(pglogq.ShardUnavailable, match="s2"):
            sapi.send("q", {"x": 1}, key=keys["s2"][0])
        assert [len(cluster.events(n, "q")) for n in ("s0", "s1")] == before  # nothing sent elsewhere
        sapi.send("q", {"x": 2}, key=keys["s0"][0])
        sapi.send("q", {"x": 3})  # unkeyed: another shard takes it
        with pytest.raises(pglogq.ShardUnavailable, match="sent 3 of 6"):
            sapi.send_batch("q", [{"x": 4}] * 6, keys=keys["s1"] + keys["s2"])
        got = []
        while True:
            batch = sapi.receive("q", "c")
            if not batch:
                break
            assert batch.shard in ("s0", "s1")
            got.extend(m.payload["k"] for m in batch)
            batch.ack()
        assert sorted(got) == sorted(keys["s0"] + keys["s1"])
        with pytest.raises(pglogq.ShardUnavailable):
            sapi.create_queue("q2")
        for n in ("s0", "s1"):
            with pglogq.Client(cluster.dsns[n]) as one:
                assert [i.queue_name for i in one.queue_info()] == ["q", "q2"]
    assert sapi.create_queue("q2") is True  # made on s2 now
    # back: its events come (receive leaves a failed shard alone for a second or two)
    late = wait_for(lambda: sapi.receive("q", "c"), "the events of s2", timeout=30, interval=0.2)
    assert late.shard == "s2" and sorted(m.payload["k"] for m in late) == sorted(keys["s2"])
    late.ack()


def test_no_seed_answers(server_dsn: str) -> None:
    bad = conninfo_to_dict(server_dsn)
    bad["dbname"] = "pglogq_no_such_database"
    client = pglogq.ShardedClient([psycopg.conninfo.make_conninfo("", **bad)], shard_timeout=1.0)
    with pytest.raises(pglogq.ShardUnavailable, match="no seed"):
        client.send("q", {}, key="k")
    client.close()
    with pytest.raises(pglogq.ClientClosed):
        client.refresh_map()
    with pytest.raises(pglogq.InvalidArgument):
        pglogq.ShardedClient([])
