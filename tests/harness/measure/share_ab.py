"""Share consumer against the SKIP LOCKED jobs table: the no-op drains of the benchmark's
share_jobs scenario (its part 1), for two (or more) trees of the SQL, interleaved.

    python -m tests.harness.measure.share_ab --dsn SERVER_DSN [--rounds 3] [--jobs 400] \\
        [--workers 2,8] [--claims 1,100] [--lanes NAME,...] base=/tmp/base-tree branch=.

Each ``NAME=PATH`` is a tree holding ``pglogq/`` and ``sql/`` (a clone, a worktree, or
``git archive main | tar -x -C DIR``); its schema is installed, by that tree's own ``pglogq``, in a
database of its own (``share_ab_NAME``, made again), so that trees that differ in their SQL run
side by side on one server.  The workers are the benchmark's own (``share_jobs.share_drain`` and
``table_drain``: this tree's client, receive then ack; claim then DELETE).  Every round, for
each worker count and claim / lease size: the jobs table (in ``share_ab_table``, vacuumed before
each drain, as the scenario does) is drained, then each tree's share consumer, the trees' order
flipped every other round, each from a backlog of ``--jobs`` events (ten times that for a claim
above 1).  The trees named by ``--lanes`` subscribe their consumer with lanes (one tree may
be named twice, e.g. ``one=. lanes=. --lanes lanes``).  Prints each drain and the medians of
the share / table ratio of the same round: on a busy machine only ratios mean something.  The
DSN is an admin connection to the server.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import pglogq
from tests.harness.bench import payload
from tests.harness.bench.share_jobs import CLAIM_FN, CONSUMER, JOBS, _warm, share_drain, table_drain
from tests.harness.bench.systems.jobs_table import DDL
from tests.support.db import with_db

QUEUE = "share_ab"
_INSTALL = "import sys; sys.path.insert(0, sys.argv[1]); import pglogq; pglogq.Client(sys.argv[2]).install_schema()"


def fresh_db(server: str, name: str, settings: list[str]) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
        for setting in settings:
            key, _, value = setting.partition("=")
            conn.execute(f'ALTER DATABASE "{name}" SET {key} = {value}')
    return with_db(server, name)


def install(tree: Path, dsn: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-c", _INSTALL, str(tree), dsn], env=env, cwd=tree, check=True)


def drain(
    pool: ProcessPoolExecutor, fn: Callable[..., tuple[int, float]], args: list[tuple[Any, ...]],
) -> tuple[int, float]:
    start_at = time.time() + 0.5
    futs = [pool.submit(fn, *a, start_at) for a in args]
    parts = [f.result() for f in futs]
    return sum(p[0] for p in parts), max(p[1] for p in parts) - start_at


def share_rate(pool: ProcessPoolExecutor, dsn: str, workers: int, lease: int, n: int, fused: bool) -> float:
    with pglogq.Client(dsn) as c:
        for start in range(0, n, 1000):
            c.send_batch(QUEUE, [payload.make(start + i) for i in range(min(1000, n - start))])
        c.tick(QUEUE, force=True)
    count, secs = drain(pool, functools.partial(share_drain, fused=fused),
                        [(dsn, QUEUE, f"w{i}", lease) for i in range(workers)])
    assert count == n, (count, n)
    return count / secs


def table_rate(pool: ProcessPoolExecutor, dsn: str, workers: int, claim: int, n: int) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, n, 1000):
            conn.execute(f"INSERT INTO {JOBS} (job_type, data) SELECT 'bench', jsonb_array_elements(%s)",
                         (Jsonb([payload.make(start + i) for i in range(min(1000, n - start))]),))
        conn.execute(f"VACUUM {JOBS}")
    count, secs = drain(pool, table_drain, [(dsn, f"w{i}", claim) for i in range(workers)])
    assert count == n, (count, n)
    return count / secs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="an admin connection to the server")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=400, help="backlog of a drain by 1 (x10 for a larger claim)")
    ap.add_argument("--workers", default="2,8")
    ap.add_argument("--claims", default="1,100")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a server setting for every database of the run (ALTER DATABASE), e.g. "
                         "synchronous_commit=off to see what the commits' flushes cost")
    ap.add_argument("--lanes", default="", help="the trees whose share consumer is subscribed with lanes")
    ap.add_argument("--separate", default="", help="the trees whose workers acknowledge each page on its own"
                                                  " (else with the next receive)")
    ap.add_argument("trees", nargs="+", metavar="NAME=PATH")
    args = ap.parse_args(argv)
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in args.trees)]
    points = [(int(w), int(k)) for w in args.workers.split(",") for k in args.claims.split(",")]
    table_dsn = fresh_db(args.dsn, "share_ab_table", args.set)
    with psycopg.connect(table_dsn, autocommit=True) as conn:
        conn.execute(DDL.replace("bench_claim_jobs", CLAIM_FN).replace("bench_jobs", JOBS))
    dsns: dict[str, str] = {}
    for name, tree in trees:
        dsns[name] = fresh_db(args.dsn, f"share_ab_{name}", args.set)
        install(tree, dsns[name])
        with pglogq.Client(dsns[name]) as c:
            c.create_queue(QUEUE)
            if name in args.lanes.split(","):
                c.subscribe(QUEUE, CONSUMER, share=True, lanes=True)
            else:
                c.subscribe(QUEUE, CONSUMER, share=True)
    ratios: dict[tuple[str, int, int], list[float]] = {}
    pool = ProcessPoolExecutor(max_workers=max(w for w, _ in points), mp_context=multiprocessing.get_context("spawn"))
    with pool:
        list(pool.map(_warm, range(max(w for w, _ in points))))
        for r in range(args.rounds):
            for workers, claim in points:
                n = args.jobs * (10 if claim > 1 else 1)
                t = table_rate(pool, table_dsn, workers, claim, n)
                line = [f"round {r} {workers} workers, claim {claim}: table {t:,.0f}/s"]
                for name, _ in trees if r % 2 == 0 else trees[::-1]:
                    s = share_rate(pool, dsns[name], workers, claim, n, name not in args.separate.split(","))
                    ratios.setdefault((name, workers, claim), []).append(s / t)
                    line.append(f"{name} {s:,.0f}/s ({s / t:.2f}x)")
                print(", ".join(line), flush=True)
    for workers, claim in points:
        print(f"{workers} workers, claim {claim}: median share / table "
              + ", ".join(f"{name} {statistics.median(ratios[(name, workers, claim)]):.2f}x" for name, _ in trees))


if __name__ == "__main__":
    main()
