"""The consumer runtime on partitioned queues, on Consumer and AsyncConsumer: per-key
order with ``workers`` receive loops, strict failure handling, and ``workers`` on a plain queue."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

import pglogq
from tests.support.consumers import MODES, Spec, run_once, running
from tests.support.waiting import wait_for


class Recorder:
    """What a handler saw: (key, seq, retry_count, worker) in handling order, and whether two
    events of one key (or any two events, ``overall``) ever ran at the same time."""

    def __init__(self, mode: str, sleep: float = 0.0, fail_once: set[int] | None = None) -> None:
        self.mode = mode
        self.sleep = sleep
        self.fail_once = set(fail_once or ())
        self.lock = threading.Lock()
        self.log: list[tuple[str, int, int, str]] = []
        self.done: dict[str, list[int]] = defaultdict(list)
        self.in_flight: Counter[str] = Counter()
        self.running = 0
        self.max_running = 0
        self.overlaps = 0

    def __call__(self, msg: Any) -> Any:
        """The handler: sleeps with time.sleep (threads) or asyncio.sleep (a coroutine)."""
        self._start(msg)
        if self.mode == "asyncio":
            return self._finish_later(msg)
        try:
            time.sleep(self.sleep)
        finally:
            self._finish(msg)
        return None

    async def _finish_later(self, msg: Any) -> None:
        try:
            await asyncio.sleep(self.sleep)
        finally:
            self._finish(msg)

    def _start(self, msg: Any) -> None:
        key = msg.payload["k"]
        with self.lock:
            self.in_flight[key] += 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.overlaps += self.in_flight[key] > 1
            self.log.append((key, msg.payload["seq"], msg.retry_count, msg.worker))

    def _finish(self, msg: Any) -> None:
        key, seq = msg.payload["k"], msg.payload["seq"]
        with self.lock:
            self.in_flight[key] -= 1
            self.running -= 1
            if seq in self.fail_once:
                self.fail_once.discard(seq)
                raise RuntimeError(f"event {seq} fails once")
            self.done[key].append(seq)

    def handled(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.done.values())


def keyed_queue(client: pglogq.Client, n: int, keys: int, partitions: int = 8, **config: Any) -> dict[str, list[int]]:
    """A partitioned queue "q" with consumer "c" and ``n`` events over ``keys`` keys, ticked;
    returns each key's seqs in send order."""
    client.create_queue("q", partitions=partitions)
    client.subscribe("q", "c")
    for param, value in config.items():
        client.set_queue_config("q", param, value)
    names = [f"key-{i % keys}" for i in range(n)]
    for start in range(0, n, 500):
        part = range(start, min(n, start + 500))
        client.send_batch("q", [{"k": names[i], "seq": i} for i in part], keys=[names[i] for i in part])
    client.tick("q", force=True)
    order: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(names):
        order[k].append(i)
    return order


@pytest.mark.parametrize("mode", MODES)
def test_workers_read_partitions_in_parallel_in_key_order(mode: str, client: pglogq.Client, dsn: str) -> None:
    order = keyed_queue(client, 2000, 50)
    rec = Recorder(mode, sleep=0.001)
    spec = Spec(dsn, "q", "c", kwargs={"workers": 4, "concurrency": 4, "worker": "w"})
    spec.handler()(rec)
    t0 = time.monotonic()
    stats = run_once(mode, spec, stop_when_idle=True)
    elapsed = time.monotonic() - t0
    assert rec.handled() == 2000 and stats.handled == 2000 and stats.failed == 0
    assert dict(rec.done) == dict(order)  # each once, per key in send order
    assert rec.overlaps == 0  # never two events of one key at once
    workers = {w for *_, w in rec.log}
    assert workers <= {"w-0", "w-1", "w-2", "w-3"} and len(workers) > 1, workers
    assert rec.max_running > 1  # the loops did run at the same time
    assert elapsed < 10
    assert len(client.receive("q", "c")) == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_failure_holds_its_key_until_its_retry(mode: str, client: pglogq.Client, dsn: str) -> None:
    order = keyed_queue(client, 400, 20, retry_delay="0.2 s")
    bad_key = "key-3"
    bad = order[bad_key][4]  # the fifth event of key-3 fails once
    rec = Recorder(mode, fail_once={bad})
    spec = Spec(dsn, "q", "c", kwargs={"workers": 3, "poll_interval": 0.1})
    spec.handler()(rec)
    with running(mode, spec) as r:
        wait_for(lambda: rec.handled() == 400, timeout=10)
        r.stop()
        stats = r.join()
    assert dict(rec.done) == dict(order)  # every key, the failed one too, in send order, each once
    assert rec.overlaps == 0
    assert (stats.failed, stats.retried, stats.dead) == (1, 1, 0)
    tries = [(seq, retry) for k, seq, retry, _ in rec.log if k == bad_key]
    at = tries.index((bad, 0))
    # after the failure the key's next handler call is the retry of that event; nothing of the
    # key ran in between, and every later event of the key came after it
    assert tries[at + 1] == (bad, 1), tries
    assert [s for s, _ in tries[at + 1:]] == order[bad_key][4:]
    others = [(k, s) for k, s, retry, _ in rec.log if k != bad_key]
    assert len(others) == 380 and all(retry == 0 for k, _, retry, _ in rec.log if k != bad_key)


@pytest.mark.parametrize("mode", MODES)
def test_a_dead_failure_does_not_end_the_page(mode: str, client: pglogq.Client, dsn: str) -> None:
    order = keyed_queue(client, 30, 1, partitions=2, max_retries=0)
    bad = order["key-0"][10]
    rec = Recorder(mode, fail_once={bad})
    spec = Spec(dsn, "q", "c", kwargs={"concurrency": 4})
    spec.handler()(rec)
    stats = run_once(mode, spec, stop_when_idle=True)
    assert rec.done["key-0"] == [s for s in order["key-0"] if s != bad]
    assert (stats.pages, stats.failed, stats.dead, stats.retried) == (1, 1, 1, 0)
    assert rec.max_running == 1  # one at a time on a partition, whatever concurrency
    assert [d.msg_id for d in client.dlq_inspect("q")] == [bad + 1]  # msg ids start at 1


@pytest.mark.parametrize("mode", MODES)
def test_workers_share_an_unpartitioned_queue(mode: str, client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "batch_max_events", 50)
    for t in range(6):
        client.send_batch("q", [{"k": "x", "seq": t * 50 + i} for i in range(50)])
        client.tick("q", force=True)
    seen: list[int] = []
    lock = threading.Lock()
    spec = Spec(dsn, "q", "c", kwargs={"workers": 3})

    @spec.handler()
    def handle(msg: Any) -> None:
        time.sleep(0.001)
        with lock:
            seen.append(msg.payload["seq"])

    stats = run_once(mode, spec, stop_when_idle=True)
    assert sorted(seen) == list(range(300)) and stats.handled == 300


@pytest.mark.parametrize("mode", MODES)
def test_stop_stops_every_loop(mode: str, client: pglogq.Client, dsn: str) -> None:
    keyed_queue(client, 10, 10)
    rec = Recorder(mode)
    spec = Spec(dsn, "q", "c", kwargs={"workers": 4, "poll_interval": 5})
    spec.handler()(rec)
    with running(mode, spec) as r:
        wait_for(lambda: rec.handled() == 10, timeout=10)
        t0 = time.monotonic()
        r.stop()
        stats = r.join(10)
    assert time.monotonic() - t0 < 3 and stats.handled == 10


@pytest.mark.parametrize("cls", [pglogq.Consumer, pglogq.AsyncConsumer])
def test_workers_argument_is_checked(cls: Any) -> None:
    for bad in (True, "2", 2.0):
        with pytest.raises(TypeError, match="workers"):
            cls("postgresql://x", "q", "c", workers=bad)
    for bad in (0, -1, 1025):
        with pytest.raises(ValueError, match="workers"):
            cls("postgresql://x", "q", "c", workers=bad)
    with pytest.raises(ValueError, match="workers=1"):
        cls("postgresql://x", "q", "c", workers=2, transactional=True)
    with pytest.raises(ValueError, match="too long"):
        cls("postgresql://x", "q", "c", workers=100, worker="w" * 61)
    assert cls("postgresql://x", "q", "c", workers=1024).workers == 1024
    assert cls("postgresql://x", "q", "c", workers=10, worker="w" * 60).workers == 10
