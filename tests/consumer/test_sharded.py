"""The consumer runtime on a cluster of shards, on Consumer and AsyncConsumer: one
receive loop per shard and worker, every event handled once, per-key order with partitions and
workers, a move of slots while producers and the consumer run, and a shard that goes down; the
first three also for a share consumer (its handler slots on every shard, leases of one shard)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.cluster import cluster_admin
from pglogq.cluster import sharded_consumer as consumer_module
from tests.support.cluster import Cluster, make_cluster
from tests.support.consumers import MODES, Spec, run_once, running
from tests.support.waiting import wait_for


@pytest.fixture
def cluster(new_db: Callable[[], str], server_dsn: str) -> Cluster:
    return make_cluster(new_db, server_dsn, 3)


class Recorder:
    """What the handlers saw: per key the seqs handled, in handling order; each event's count;
    the shards and workers seen; whether two events of one key ever ran at once."""

    def __init__(self, mode: str, sleep: float = 0.0) -> None:
        self.mode = mode
        self.sleep = sleep
        self.lock = threading.Lock()
        self.done: dict[str, list[int]] = defaultdict(list)
        self.count: Counter[tuple[str, int]] = Counter()
        self.shards: Counter[str | None] = Counter()
        self.workers: set[tuple[str | None, str]] = set()
        self.in_flight: Counter[str] = Counter()
        self.overlaps = 0

    def __call__(self, msg: Any) -> Any:
        key = msg.payload["k"]
        with self.lock:
            self.in_flight[key] += 1
            self.overlaps += self.in_flight[key] > 1
        if self.mode == "asyncio":
            return self._later(msg)
        time.sleep(self.sleep)
        self._finish(msg)
        return None

    async def _later(self, msg: Any) -> None:
        await asyncio.sleep(self.sleep)
        self._finish(msg)

    def _finish(self, msg: Any) -> None:
        key, seq = msg.payload["k"], msg.payload["seq"]
        with self.lock:
            self.in_flight[key] -= 1
            self.done[key].append(seq)
            self.count[(key, seq)] += 1
            self.shards[msg.shard] += 1
            self.workers.add((msg.shard, msg.worker))

    def handled(self) -> int:
        with self.lock:
            return sum(self.count.values())


def send_keyed(client: pglogq.ShardedClient, keys: list[str], per_key: int, start: int = 0) -> dict[str, list[int]]:
    """``per_key`` events of each key (payload k, seq), interleaved, in batches; each key's seqs."""
    order: dict[str, list[int]] = defaultdict(list)
    payloads, ks = [], []
    for i in range(per_key):
        for k in keys:
            seq = start + i
            payloads.append({"k": k, "seq": seq})
            ks.append(k)
            order[k].append(seq)
    for j in range(0, len(payloads), 200):
        client.send_batch("q", payloads[j:j + 200], keys=ks[j:j + 200])
    return order


@pytest.mark.parametrize("share", [False, True], ids=["batches", "share"])
@pytest.mark.parametrize("mode", MODES)
def test_every_event_is_handled_once_across_the_shards(mode: str, share: bool, cluster: Cluster) -> None:
    with pglogq.ShardedClient(cluster.seeds) as client:
        client.create_queue("q")
        client.subscribe("q", "c", share=share)
        order = send_keyed(client, [f"key-{i}" for i in range(30)], 10)
        for i in range(12):
            client.send("q", {"k": f"loose-{i}", "seq": 0})  # unkeyed: the shards in turn
        client.tick("q", force=True)
    rec = Recorder(mode)
    spec = Spec("", "q", "c", kwargs={"poll_interval": 0.1, "share": share}, sharded=cluster.seeds[:1])
    spec.handler()(rec)
    stats = run_once(mode, spec, stop_when_idle=True)
    assert stats.handled == rec.handled() == 312 and stats.failed == 0
    assert set(rec.count.values()) == {1}  # each once
    assert {k: v for k, v in rec.done.items() if k.startswith("key-")} == dict(order)
    assert set(rec.shards) == {"s0", "s1", "s2"} and rec.shards.total() == 312
    assert rec.shards["s0"] >= 4 and rec.shards["s1"] >= 4 and rec.shards["s2"] >= 4
    for shard_dsn in cluster.dsns.values():
        # a share consumer ran as one: its slot received as a worker of its own on every shard
        with psycopg.connect(shard_dsn) as conn:
            workers = conn.execute("SELECT count(*) FROM pglogq.subscriber WHERE parent_id IS NOT NULL "
                                   "AND worker_name LIKE '%-0'").fetchone()
        assert workers == (1 if share else 0,)


@pytest.mark.parametrize("share", [False, True], ids=["batches", "share"])
@pytest.mark.parametrize("mode", MODES)
def test_per_key_order_with_partitions_and_workers(mode: str, share: bool, cluster: Cluster) -> None:
    with pglogq.ShardedClient(cluster.seeds) as client:
        client.create_queue("q", partitions=4)
        client.subscribe("q", "c", share=share)
        order = send_keyed(client, [f"key-{i}" for i in range(40)], 15)
        client.tick("q", force=True)
    rec = Recorder(mode, sleep=0.001)
    spec = Spec("", "q", "c", kwargs={"workers": 2, "concurrency": 2, "worker": "w", "poll_interval": 0.1,
                                      "share": share},
                sharded=cluster.seeds[:1])
    spec.handler()(rec)
    stats = run_once(mode, spec, stop_when_idle=True)
    assert stats.handled == 600 and set(rec.count.values()) == {1}, _left_behind(cluster, spec, mode, stats)
    assert dict(rec.done) == dict(order)  # per key in send order, each once
    assert rec.overlaps == 0  # never two events of one key at once
    # a share consumer's slots: workers * concurrency of them on each shard
    assert {w for _, w in rec.workers} <= ({f"w-{i}" for i in range(4)} if share else {"w-0", "w-1"})
    assert {s for s, _ in rec.workers} == {"s0", "s1", "s2"}


def _left_behind(cluster: Cluster, spec: Spec, mode: str, stats: Any) -> str:
    """Why a drain ended with events left: each shard's streams and marks, and what a second
    drain finds (events it finds were stranded, not lost)."""
    lines = [f"first drain: {stats}"]
    for name, shard_dsn in cluster.dsns.items():
        with psycopg.connect(shard_dsn) as conn:
            lines.append(f"{name} streams: " + repr(conn.execute(
                "SELECT x.stream, st.last_tick, st.batch_id, st.page_end_id, st.lease_worker, st.hold_until, "
                "st.released_at FROM pglogq.subscriber x JOIN pglogq.sub_state st USING (sub_id) "
                "WHERE x.stream IS NOT NULL ORDER BY 1").fetchall()))
            lines.append(f"{name} marks: " + repr(conn.execute(
                "SELECT stream, tick_id, since_tick, epoch FROM pglogq.stream_mark ORDER BY seq").fetchall()))
            lines.append(f"{name} consumer: " + repr(conn.execute(
                "SELECT st.last_tick, st.due_tick, (SELECT max(tick_id) FROM pglogq.tick) FROM pglogq.subscriber x "
                "JOIN pglogq.sub_state st USING (sub_id) WHERE x.parent_id IS NULL").fetchall()))
    lines.append(f"second drain: {run_once(mode, spec, stop_when_idle=True)}")
    return "\n".join(lines)


class Producer(threading.Thread):
    """Sends events of its keys one by one, each key's seq growing, until stopped; ``sent`` keeps
    each key's seqs in the order their sends returned."""

    def __init__(self, client: pglogq.ShardedClient, keys: list[str]) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.keys = keys
        self.sent: dict[str, list[int]] = defaultdict(list)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        seq = 0
        try:
            while not self.stop.is_set():
                for k in self.keys:
                    self.client.send("q", {"k": k, "seq": seq}, key=k)
                    self.sent[k].append(seq)
                seq += 1
        except BaseException as exc:
            self.error = exc


def tick_every(seeds: list[str], stop: threading.Event, interval: float = 0.05) -> threading.Thread:
    def main() -> None:
        with pglogq.ShardedClient(seeds) as ticker:
            while not stop.wait(interval):
                ticker.tick("q", force=True)
            ticker.tick("q", force=True)

    t = threading.Thread(target=main, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("share", [False, True], ids=["batches", "share"])
@pytest.mark.parametrize("mode", MODES)
def test_a_move_of_slots_while_producers_and_the_consumer_run(mode: str, share: bool, cluster: Cluster) -> None:
    m = cluster.read_map()
    (lo, hi), = m.slots_of("s0")
    half = (lo + hi) // 2
    moving = [k for k in (f"mv-{i}" for i in range(400)) if lo <= pglogq.key_slot(k) <= half][:8]
    staying = cluster.keys_of("s0", 3, prefix="stay-") + cluster.keys_of("s2", 3, prefix="far-")
    staying = [k for k in staying if pglogq.key_slot(k) > half or m.shard_for_key(k) != "s0"]
    setup = pglogq.ShardedClient(cluster.seeds)
    setup.create_queue("q", partitions=4)
    setup.subscribe("q", "c", share=share)
    rec = Recorder(mode)
    spec = Spec("", "q", "c", kwargs={"workers": 2, "poll_interval": 0.05, "worker": "w", "share": share},
                sharded=cluster.seeds[:1])
    spec.handler()(rec)
    stop_ticks = threading.Event()
    producers = [Producer(setup, moving[:4] + staying[:3]), Producer(setup, moving[4:] + staying[3:])]
    with running(mode, spec) as r:
        ticker = tick_every(cluster.seeds, stop_ticks)
        for p in producers:
            p.start()
        wait_for(lambda: rec.handled() > 100, "events handled before the move")
        cluster_admin.move_slots(cluster.seeds[0], lo, half, "s1")
        handled_at_move = rec.handled()
        wait_for(lambda: rec.handled() > handled_at_move + 100, "events handled after the move")
        for p in producers:
            p.stop.set()
        for p in producers:
            p.join(30)
            assert p.error is None, p.error
        stop_ticks.set()
        ticker.join(30)
        sent: dict[str, list[int]] = {}
        for p in producers:
            sent.update(p.sent)
        total = sum(len(v) for v in sent.values())
        wait_for(lambda: rec.handled() >= total, f"the {total} events sent handled", timeout=120)
        time.sleep(0.3)  # a duplicate would come now
        r.stop()
        r.join()
    setup.close()
    assert rec.handled() == total
    lost = sum(1 for k, seqs in sent.items() for s in seqs if rec.count[(k, s)] == 0)
    duplicates = sum(n - 1 for n in rec.count.values() if n > 1)
    violations = sum(1 for k in sent for a, b in zip(rec.done[k], rec.done[k][1:], strict=False) if b <= a)
    assert (lost, duplicates, violations) == (0, 0, 0)
    assert rec.overlaps == 0
    # the move was real: the moved keys' events are on both shards, and the gate was passed
    on_s0 = {k for k, _ in cluster.events("s0", "q")}
    on_s1 = {k for k, _ in cluster.events("s1", "q")}
    assert set(moving) <= on_s0 and set(moving) <= on_s1
    assert cluster.read_map().version == 2
    with psycopg.connect(cluster.dsns["s1"]) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.cluster_gate").fetchone() == (0,)


@pytest.mark.parametrize("mode", MODES)
def test_a_shard_that_is_down_stops_only_its_keys(mode: str, cluster: Cluster) -> None:
    keys = {name: cluster.keys_of(name, 4, prefix=f"{name}-") for name in cluster.names}
    with pglogq.ShardedClient(cluster.seeds, shard_timeout=1.0) as client:
        client.create_queue("q")
        client.subscribe("q", "c")
        first = send_keyed(client, [k for ks in keys.values() for k in ks], 5)
        client.tick("q", force=True)
        rec = Recorder(mode)
        spec = Spec("", "q", "c", kwargs={"poll_interval": 0.1}, sharded=cluster.seeds[:1],
                    sharded_kwargs={"shard_timeout": 1.0})
        spec.handler()(rec)
        up = [k for n in ("s0", "s1") for k in keys[n]]
        with contextlib.ExitStack() as outage:
            outage.enter_context(cluster.down("s2"))
            with running(mode, spec) as r:
                wait_for(lambda: all(len(rec.done[k]) == 5 for k in up), "the events of s0 and s1")
                with pytest.raises(pglogq.ShardUnavailable):
                    client.send("q", {"k": keys["s2"][0], "seq": 99}, key=keys["s2"][0])
                second = send_keyed(client, up, 3, start=5)
                for n in ("s0", "s1"):
                    with pglogq.Client(cluster.dsns[n]) as one:
                        one.tick("q", force=True)
                wait_for(lambda: all(len(rec.done[k]) == 8 for k in up), "the second wave of s0 and s1")
                assert not any(rec.done[k] for k in keys["s2"])  # its keys wait, nothing else does
                assert r.thread.is_alive() and r.error is None
                wait_for(lambda: any(loop.shard == "s2" and loop.stats.errors > 0 for loop in r.consumer._loops),
                         "the loop of s2 meeting its shard down")
                assert not any(rec.done[k] for k in keys["s2"])
                outage.close()  # s2 is back
                wait_for(lambda: all(len(rec.done[k]) == 5 for k in keys["s2"]),
                         "the events of s2 once it is back", timeout=120)
                r.stop()
                stats = r.join()
    assert stats.errors > 0  # the loop of s2 did meet its shard down
    assert set(rec.count.values()) == {1}
    expect = {k: first[k] + second.get(k, []) for k in first}
    assert dict(rec.done) == expect



def test_a_shard_added_while_the_consumer_runs_gets_its_loops(
    new_db: Callable[[], str], server_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumer_module, "MAP_REFRESH", 0.2)  # the watcher reads the map often
    cluster = make_cluster(new_db, server_dsn, 2)
    keys = [f"key-{i}" for i in range(12)]
    rec = Recorder("thread")
    spec = Spec("", "q", "c", kwargs={"poll_interval": 0.1}, sharded=cluster.seeds[:1])
    spec.handler()(rec)
    with pglogq.ShardedClient(cluster.seeds) as client:
        client.create_queue("q")
        client.subscribe("q", "c")
        first = send_keyed(client, keys, 3)
        client.tick("q", force=True)
        with running("thread", spec) as r:
            wait_for(lambda: rec.handled() == 36, "the events of the first two shards")
            cluster_admin.add_shard(cluster.seeds[0], new_db(), "s2")
            client.refresh_map()  # add_shard made the queue and the consumer on the new shard
            moved = [k for k in keys if client.map is not None and client.map.shard_for_key(k) == "s0"][:3]
            for k in moved:
                slot = pglogq.key_slot(k)
                cluster_admin.move_slots(cluster.seeds[0], slot, slot, "s2")
            second = send_keyed(client, keys, 2, start=3)
            assert client.map is not None and all(client.map.shard_for_key(k) == "s2" for k in moved)
            client.tick("q", force=True)
            wait_for(lambda: rec.handled() == 60, "the events sent after the new shard joined")
            r.stop()
            r.join()
    assert rec.shards["s2"] == 2 * len(moved) and len(moved) == 3
    assert set(rec.count.values()) == {1}
    assert dict(rec.done) == {k: first[k] + second[k] for k in keys}


def test_a_consumer_started_while_its_seed_is_down_waits_for_it(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    with pglogq.ShardedClient(cluster.seeds) as client:
        client.create_queue("q")
        client.subscribe("q", "c")
        order = send_keyed(client, [f"key-{i}" for i in range(9)], 2)
        client.tick("q", force=True)
    rec = Recorder("thread")
    spec = Spec("", "q", "c", kwargs={"poll_interval": 0.1}, sharded=cluster.seeds[:1],
                sharded_kwargs={"shard_timeout": 1.0})
    spec.handler()(rec)
    with contextlib.ExitStack() as outage:
        outage.enter_context(cluster.down("s0"))
        with running("thread", spec) as r:
            wait_for(lambda: "cannot read the shard map" in caplog.text, "the consumer meeting its seed down")
            assert r.thread.is_alive() and rec.handled() == 0
            outage.close()
            wait_for(lambda: rec.handled() == 18, "every event once the seed is back")
            r.stop()
            stats = r.join()
    assert stats.errors >= 1 and stats.handled == 18
    assert dict(rec.done) == dict(order)


@pytest.mark.parametrize("mode", MODES)
def test_a_drain_reads_a_gated_shard_once_the_old_shard_is_done(mode: str, cluster: Cluster) -> None:
    keys = cluster.keys_of("s0", 4, prefix="gate-")
    with pglogq.ShardedClient(cluster.seeds) as client:
        client.create_queue("q")
        client.subscribe("q", "c")
        first = send_keyed(client, keys, 3)
        client.tick("q", force=True)
        for k in keys:
            slot = pglogq.key_slot(k)
            cluster_admin.move_slots(cluster.seeds[0], slot, slot, "s1")
        second = send_keyed(client, keys, 2, start=3)  # to s1 now, gated behind s0's first events
        client.tick("q", force=True)
    assert {k for k, _ in cluster.events("s1", "q")} == set(keys)
    rec = Recorder(mode)
    spec = Spec("", "q", "c", kwargs={"poll_interval": 0.05}, sharded=cluster.seeds[:1])
    spec.handler()(rec)
    stats = run_once(mode, spec, stop_when_idle=True)
    assert stats.handled == 20
    assert dict(rec.done) == {k: first[k] + second[k] for k in keys}
