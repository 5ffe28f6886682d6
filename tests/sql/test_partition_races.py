"""Concurrent receivers, ticks and producers on a partitioned queue: no event lost, none twice.

The streams a receive looks at are marked when a tick is taken in and unmarked by the receive
that finds a stream empty (pglogq.stream_mark): a mark lost between a receive that read a stream
up to one tick and a tick taken in meanwhile would leave that partition's events unread for good.
Here two consumers' workers receive and acknowledge while a ticker ticks as fast as it can and
producers send keyed events (single sends and batches, some rolled back); at the end every
committed event was delivered to each consumer exactly once, and the events of each key in the
order they were sent (each key has one producer, which sends it in sequence)."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from tests.support.waiting import wait_for

CONSUMERS = ("c1", "c2")
WORKERS = 3
PRODUCERS = 2
KEYS_PER_PRODUCER = 6
EVENTS_PER_PRODUCER = 800


def run_race(dsn: str, partitions: int, seed: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SELECT pglogq.create_queue('race')")
            conn.execute("SELECT pglogq.set_queue_config('race', 'partitions', %s)", (str(partitions),))
        for c in CONSUMERS:
            conn.execute("SELECT pglogq.subscribe('race', %s)", (c,))
    stop = threading.Event()
    lock = threading.Lock()
    sent: dict[int, tuple[str, int]] = {}  # msg_id -> (key, sequence number of the key)
    delivered: dict[str, list[int]] = {c: [] for c in CONSUMERS}  # in the order received
    errors: list[BaseException] = []

    def guarded(fn: Any) -> Any:
        def run(*args: Any) -> None:
            try:
                fn(*args)
            except BaseException as e:  # reported by the test
                errors.append(e)
                stop.set()
        return run

    @guarded
    def producer(p: int) -> None:
        rng = random.Random(seed * 100 + p)
        keys = [f"p{p}-k{i}" for i in range(KEYS_PER_PRODUCER)]
        seq: dict[str, int] = defaultdict(int)
        n = 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            while n < EVENTS_PER_PRODUCER and not stop.is_set():
                batch = [rng.choice(keys) for _ in range(rng.randint(1, 4))]
                rollback = rng.random() < 0.1
                with conn.transaction(force_rollback=rollback):
                    payloads = []
                    nums = dict(seq)
                    for k in batch:
                        nums[k] = nums.get(k, 0) + 1
                        payloads.append({"key": k, "seq": nums[k]})
                    if len(batch) == 1:
                        row = conn.execute("SELECT ARRAY[pglogq.send_keyed('race', %s::jsonb, %s)]",
                                           (json.dumps(payloads[0]), batch[0])).fetchone()
                    else:
                        row = conn.execute("SELECT pglogq.send_batch_keyed('race', %s::jsonb, %s)",
                                           (json.dumps(payloads), batch)).fetchone()
                    assert row is not None
                if not rollback:
                    seq.update(nums)
                    with lock:
                        for msg_id, body in zip(row[0], payloads, strict=True):
                            sent[msg_id] = (body["key"], body["seq"])
                    n += len(batch)

    @guarded
    def ticker() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute("SELECT pglogq.force_tick('race')")

    @guarded
    def worker(consumer: str, w: int) -> None:
        rng = random.Random(seed * 1000 + w)
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                page = conn.execute(
                    "SELECT batch_id, msg_id, txid FROM pglogq.receive('race', %s, %s, %s)",
                    (consumer, rng.randint(1, 5), f"w{w}")).fetchall()
                if not page:
                    continue
                with lock:  # before the ack: the partition's next page comes only after it
                    delivered[consumer] += [m[1] for m in page]
                assert conn.execute("SELECT pglogq.ack(%s, %s, %s)", page[-1]).fetchone() == (True,)

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(PRODUCERS)]
    threads += [threading.Thread(target=ticker)]
    threads += [threading.Thread(target=worker, args=(c, w)) for c in CONSUMERS for w in range(WORKERS)]
    for t in threads:
        t.start()
    try:
        for t in threads[:PRODUCERS]:
            t.join()

        def all_delivered() -> bool:
            if errors:
                return True
            with lock:
                return all(len(delivered[c]) >= len(sent) for c in CONSUMERS)

        wait_for(all_delivered, "every event delivered to both consumers", timeout=120)
    finally:
        stop.set()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    for c in CONSUMERS:
        got = delivered[c]
        assert len(got) == len(set(got)), f"{c}: an event delivered twice"
        assert set(got) == set(sent), f"{c}: missing {sorted(set(sent) - set(got))[:10]}"
        last: dict[str, int] = {}
        for msg_id in got:
            key, n = sent[msg_id]
            assert n == last.get(key, 0) + 1, f"{c}: key {key} event {n} after {last.get(key, 0)}"
            last[key] = n


@pytest.mark.parametrize("partitions", [4, 64])
def test_concurrent_receivers_ticks_and_producers_lose_nothing(dsn: str, partitions: int) -> None:
    run_race(dsn, partitions, seed=partitions)
