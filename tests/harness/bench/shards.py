"""Scenario: one queue across shards.  Keyed producing and a Consumer drain with 1, 2
and 3 shards, and what the router costs.

**Where the shards live.**  The full run starts three embedded PostgreSQL servers of its own
(:mod:`tests.support.servers`), server ``i`` pinned to core ``i % cores`` (``pg_ctl`` runs under
``taskset``: every process of the server inherits the core), with the bench server's durability
and memory settings; the cluster of ``n`` shards is a database ``pglogq_shards_<n>_<i>`` on each of
the first ``n`` servers (one cluster per database: the three clusters live side by side).  On a
2-core machine the third shard shares core 0 with the first, and the client processes share the
cores with them: the figures say what one machine does, not what three would.  The ``--quick``
run puts the shards in databases of the bench server instead (no servers to start: the smoke
test stays fast), which measures the routing, not the spreading.

**Cases.**

* ``keyed send_batch of 1,000``: ``ShardedClient.send_batch(queue, payloads, keys=...)`` in
  ``shard_clients`` processes at once (the keys cycle over 256 keys, so each batch splits into one
  transaction per shard, sent one after the other);
* ``keyed single sends``: ``ShardedClient.send(queue, payload, key=k)``, same processes;
* ``drain``: a backlog of keyed events (every shard ticked) drained by one ``pglogq.Consumer`` over
  the ShardedClient with a no-op handler (one receive loop per shard, ``stop_when_idle``);
* ``router overhead``: on the 1-shard cluster, in one process, rounds that alternate a plain
  ``Client.send`` / ``send_batch`` (keyed) with the same calls through ``ShardedClient`` on the
  same database, and a plain Client on a database of the same server that is not a cluster member
  (what the server's slot check costs); the ratio ShardedClient / Client is recorded too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq
from tests.harness.bench import payload
from tests.harness.bench.context import BenchContext
from tests.harness.bench.pacing import wait_until
from tests.harness.bench.results import Measure, Series
from tests.harness.bench.systems import Pglogq, System

SCENARIO = "shards"
KEYS = 256
QUEUE = "bench_shards"
DRAIN_QUEUE = "bench_shards_drain"
COPIED_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "wal_buffers",
                   "max_wal_size", "checkpoint_timeout", "work_mem", "jit")
"""Settings of the bench server the shard servers get too (so that the figures compare)."""


def key_of(i: int) -> str:
    return f"k{i % KEYS}"


@dataclass
class Host:
    """Where shard databases are made: an admin DSN, and the core the server is pinned to."""

    name: str
    admin_dsn: str
    cpu: int | None


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    s = ctx.settings
    with hosts(ctx) as where:
        made: list[tuple[Host, str]] = []
        phases: dict[str, float] = ctx.results.details.setdefault(SCENARIO, {}).setdefault("phase_seconds", {})
        try:
            drains: list[tuple[int, float]] = []
            for n in s.shard_counts:
                dsns = []
                for i, host in enumerate(where[:n]):
                    db = f"pglogq_shards_{n}_{i}"
                    made.append((host, db))
                    dsns.append(make_database(host, db))
                from pglogq.cluster import cluster_admin

                cluster_admin.init(dsns, names=[f"s{i}" for i in range(n)])
                t = time.monotonic()
                produce(ctx, n, dsns)
                phases[f"{n}: produce"] = round(time.monotonic() - t, 1)
                t = time.monotonic()
                drains.append((n, drain(ctx, n, dsns)))
                phases[f"{n}: drain"] = round(time.monotonic() - t, 1)
                if n == 1:
                    t = time.monotonic()
                    made.append((where[0], "pglogq_shards_none"))
                    plain = make_database(where[0], "pglogq_shards_none")
                    overhead(ctx, dsns[0], plain)
                    phases["router overhead"] = round(time.monotonic() - t, 1)
            ctx.results.series.append(Series(SCENARIO, "drain (Consumer)", [float(n) for n, _ in drains],
                                             [r for _, r in drains], "shards", "events/s"))
        finally:
            for host, db in [*made, *((h, TEMPLATE) for h in where)]:
                with contextlib.suppress(psycopg.Error), psycopg.connect(host.admin_dsn, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
    where_text = (f"{len(where)} embedded servers of the bench's own, pinned to cores "
                  f"{', '.join(str(h.cpu) for h in where)} of {len(os.sched_getaffinity(0))}"
                  if s.shard_servers else "databases of the bench server (quick run: routing only)")
    ctx.results.note(SCENARIO, f"shards: {where_text}; {s.shard_clients} producer processes, keys cycling over "
                               f"{KEYS}; drain of {s.shard_events:,} keyed events by one Consumer (a loop per shard)")


@contextlib.contextmanager
def hosts(ctx: BenchContext) -> Iterator[list[Host]]:
    """The servers the shard databases go to: ours (full run), or the bench server (quick)."""
    count = max(ctx.settings.shard_counts)
    if not ctx.settings.shard_servers:
        yield [Host(f"bench{i}", ctx.admin_dsn, None) for i in range(count)]
        return
    from tests.support.servers import start_servers, stop_servers

    settings: dict[str, str] = {}
    with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
        for name in COPIED_SETTINGS:
            row = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
            if row and row[0] is not None:
                settings[name] = str(row[0])
    base = Path(tempfile.mkdtemp(prefix="pglogq-bench-shards-"))
    os.chmod(base, 0o755)
    t0 = time.monotonic()
    servers = start_servers(count, base, pin=True, settings=settings, schema=False)
    ctx.results.details.setdefault(SCENARIO, {})["servers"] = {
        s.name: {"port": s.port, "cpu": s.cpu, "settings": settings} for s in servers}
    print(f"  {SCENARIO:<12} {count} servers up in {time.monotonic() - t0:.1f} s", flush=True)
    try:
        yield [Host(s.name, s.dsn, s.cpu) for s in servers]
    finally:
        stop_servers(servers, remove=True)
        shutil.rmtree(base, ignore_errors=True)


TEMPLATE = "pglogq_shards_tpl"


def make_database(host: Host, name: str) -> str:
    """A fresh database ``name`` on ``host`` with the schema installed (cloned from a template
    database of that server, made with the schema on first use); its DSN."""
    with psycopg.connect(host.admin_dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (TEMPLATE,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"'.encode())
            with pglogq.Client(make_conninfo(host.admin_dsn, dbname=TEMPLATE)) as client:
                client.install_schema()
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"'.encode())
    return make_conninfo(host.admin_dsn, dbname=name)


def label(n: int) -> str:
    return f"pglogq, {n} shard{'s' if n > 1 else ''}"


# -- produce -----------------------------------------------------------------------------------


def produce(ctx: BenchContext, n: int, dsns: list[str]) -> None:
    from pglogq.cluster.sharded_client import ShardedClient

    s = ctx.settings
    with ShardedClient(dsns) as client:
        client.create_queue(QUEUE)
    conf = {"seeds": dsns, "queue": QUEUE}
    for case, mode, batch in ((f"keyed send_batch of 1,000, {s.shard_clients} clients", "batch", 1000),
                              (f"keyed single sends, {s.shard_clients} clients", "single", 1)):
        rates = [ctx.run_clients(sharded_producer, s.shard_clients, conf, mode, batch) for _ in range(s.rounds)]
        ctx.results.add(Measure(SCENARIO, case, label(n), statistics.median(rates), "events/s", extra={
            "shards": n, "clients": s.shard_clients, "batch": batch, "rounds": [round(r) for r in rates]}))
    with ShardedClient(dsns) as client:
        client.drop_queue(QUEUE, force=True)


def sharded_producer(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    """One producer process: keyed sends through a ShardedClient until ``stop_at``; the events sent."""
    from pglogq.cluster.sharded_client import ShardedClient

    rows = [payload.make(idx * 1_000_000 + i) for i in range(max(batch, 1))]
    keys = [key_of(idx * 7 + i) for i in range(max(batch, 1))]
    n = 0
    with ShardedClient(conf["seeds"]) as client:
        client.send(conf["queue"], rows[0], key=keys[0])  # map read, pools open before the clock
        wait_until(start_at)
        i = 0
        while time.time() < stop_at:
            if mode == "single":
                client.send(conf["queue"], rows[0], key=keys[i % len(keys)])
                n += 1
                i += 1
            else:
                client.send_batch(conf["queue"], rows, keys=keys)
                n += batch
    return n


# -- drain -------------------------------------------------------------------------------------


def drain(ctx: BenchContext, n: int, dsns: list[str]) -> float:
    """Preload ``shard_events`` keyed events, tick every shard, drain them with one Consumer."""
    from pglogq.cluster.sharded_client import ShardedClient

    total = ctx.settings.shard_events
    with ShardedClient(dsns) as client:
        client.create_queue(DRAIN_QUEUE)
        client.subscribe(DRAIN_QUEUE, "c")
        rows = [payload.make(i) for i in range(1000)]
        sent = 0
        while sent < total:
            k = min(1000, total - sent)
            client.send_batch(DRAIN_QUEUE, rows[:k], keys=[key_of(sent + i) for i in range(k)])
            sent += k
        client.tick(DRAIN_QUEUE, force=True)
        count = 0
        consumer = pglogq.Consumer(client, DRAIN_QUEUE, "c")

        def noop(msg: Any) -> None:
            nonlocal count
            count += 1

        consumer.handler()(noop)
        start = time.time()
        consumer.run(stop_when_idle=True)
        seconds = time.time() - start
        client.drop_queue(DRAIN_QUEUE, force=True)
    rate = count / seconds
    ctx.results.add(Measure(SCENARIO, "drain, one Consumer (a loop per shard), no-op handler", label(n), rate,
                            "events/s", extra={"shards": n, "events": total, "drained": count,
                                               "seconds": round(seconds, 3), "durable": True}))
    if count != total:
        ctx.results.note(SCENARIO, f"{label(n)}: the Consumer drained {count} of {total} events")
    return rate


# -- the router's overhead ---------------------------------------------------------------------


def overhead(ctx: BenchContext, member: str, plain_db: str) -> None:
    """Plain Client vs ShardedClient on the same 1-shard database, and a plain Client on a
    database that is no cluster member: rounds interleaved in this process."""
    from pglogq.cluster.sharded_client import ShardedClient

    seconds = ctx.settings.point_seconds
    rounds = ctx.settings.shard_overhead_rounds
    rows = [payload.make(i) for i in range(1000)]
    keys = [key_of(i) for i in range(1000)]
    with pglogq.Client(member) as plain, ShardedClient([member]) as sharded, pglogq.Client(plain_db) as outside:
        sharded.create_queue(QUEUE)
        outside.create_queue(QUEUE)
        runners: dict[str, Any] = {"pglogq Client, not a cluster member": outside,
                                   "pglogq Client, 1-shard cluster": plain,
                                   "pglogq ShardedClient, 1-shard cluster": sharded}
        for case, batch in (("router overhead: keyed send, 1 client", 1),
                            ("router overhead: keyed send_batch of 1,000, 1 client", 1000)):
            rates: dict[str, list[float]] = {name: [] for name in runners}
            for r in range(rounds):
                order = list(runners.items())
                if r % 2:
                    order.reverse()  # neither goes first every round
                for name, client in order:
                    rates[name].append(timed_sends(client, batch, rows, keys, seconds))
            for name, values in rates.items():
                ctx.results.add(Measure(SCENARIO, case, name, statistics.median(values), "events/s",
                                        extra={"rounds": [round(v) for v in values], "batch": batch}))
            ratio = statistics.median(rates["pglogq ShardedClient, 1-shard cluster"]) / statistics.median(
                rates["pglogq Client, 1-shard cluster"])
            ctx.results.add(Measure(SCENARIO, case.replace("router overhead", "ShardedClient / Client"),
                                    "pglogq ShardedClient vs Client", ratio, "x",
                                    extra={"batch": batch, "rounds": rounds}))
        sharded.drop_queue(QUEUE, force=True)
        outside.drop_queue(QUEUE, force=True)


def timed_sends(client: Any, batch: int, rows: list[dict[str, Any]], keys: list[str], seconds: float) -> float:
    """Events per second of ``client`` sending keyed for ``seconds`` (one client, this thread)."""
    client.send(QUEUE, rows[0], key=keys[0])  # warm: a pooled connection is open
    n = 0
    i = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        if batch == 1:
            client.send(QUEUE, rows[0], key=keys[i % len(keys)])
            i += 1
            n += 1
        else:
            client.send_batch(QUEUE, rows, keys=keys)
            n += batch
    return n / (time.perf_counter() - start)
