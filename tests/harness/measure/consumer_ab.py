"""The Consumer against the SQL receive/ack loop, for two (or more) trees of the code, interleaved.

    python -m tests.harness.measure.consumer_ab --dsn DSN [--rounds 6] [--events 100000] \\
        main=/tmp/main-tree branch=.

Each ``NAME=PATH`` is a tree holding ``pglogq/`` (a clone, a worktree, or ``git archive main |
tar -x -C DIR``).  Every round, for each tree in turn (the order flipped every other round): a
fresh queue preloaded as the benchmark's consume scenario does (``preload``: batches of 1,000,
a tick every 5,000 events), drained by the SQL loop of the benchmark (``drain_worker``, pages of
10,000), then another, drained by that tree's ``pglogq.Consumer`` with a no-op handler and default
options (``run_consumer``).  Each drain runs in a subprocess that imports ``pglogq`` from its tree
(the harness itself from this one).  Prints each round and the medians: the Consumer's rate and
its ratio to the SQL loop of the same round (the benchmark's requirement 4 ratio), and the CPU
time of the client process per event (time.process_time, all its threads), which a busy
machine moves far less than the rates.  The DSN must
name a database where the pglogq schema is installed (``pglogq schema install``); its queues
``ab_sql`` and ``ab_consumer`` are dropped and made again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tests.harness import ROOT

_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import pglogq
from tests.harness.bench.systems.pglogq_system import preload, drain_worker
from tests.harness.bench.consumer_adapter import run_consumer
dsn, events, what, queue = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
with pglogq.Client(dsn) as c:
    c.drop_queue(queue, force=True)
    c.create_queue(queue)
    c.subscribe(queue, "c")
    preload(c, queue, events, 5000)
import time
cpu = time.process_time()
if what == "sql":
    n, start, end = drain_worker(dsn, queue, "c", 10000, None)
    seconds = end - start
else:
    n, seconds = run_consumer(dsn, queue, "c")
cpu = time.process_time() - cpu
with pglogq.Client(dsn) as c:
    c.drop_queue(queue, force=True)
assert n == events, (n, events)
print(json.dumps({"events": n, "seconds": seconds, "cpu": cpu, "module": pglogq.__file__}))
"""


def drain(tree: Path, what: str, dsn: str, events: int) -> tuple[float, float]:
    """Events per second of one drain (``what``: "sql" or "consumer") with ``tree``'s pglogq, and
    the drain's CPU time in the client process per event (us: what the machine's other load
    changes least)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]))
    queue = "ab_sql" if what == "sql" else "ab_consumer"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tree), dsn, str(events), what, queue],
                         env=env, capture_output=True, text=True, cwd=ROOT, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the {what} drain of {tree} failed:\n{out.stderr[-2000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not str(got["module"]).startswith(str(tree)):
        raise SystemExit(f"{tree}: pglogq was imported from {got['module']}")
    return float(got["events"]) / float(got["seconds"]), 1e6 * float(got["cpu"]) / float(got["events"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="a database with the pglogq schema installed")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("trees", nargs="+", metavar="NAME=PATH")
    args = ap.parse_args(argv)
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in args.trees)]
    sql: list[float] = []
    rates: dict[str, list[float]] = {name: [] for name, _ in trees}
    ratios: dict[str, list[float]] = {name: [] for name, _ in trees}
    cpus: dict[str, list[float]] = {name: [] for name, _ in trees}
    sql_cpu: list[float] = []
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            s, s_cpu = drain(trees[0][1], "sql", args.dsn, args.events)
            c, c_cpu = drain(tree, "consumer", args.dsn, args.events)
            sql.append(s)
            sql_cpu.append(s_cpu)
            rates[name].append(c)
            ratios[name].append(c / s)
            cpus[name].append(c_cpu)
            print(f"round {r} {name}: SQL loop {s:,.0f}/s ({s_cpu:.2f} us CPU/event), "
                  f"Consumer {c:,.0f}/s ({c_cpu:.2f} us), ratio {c / s:.3f}", flush=True)
    print(f"SQL loop: median {statistics.median(sql):,.0f} events/s, {statistics.median(sql_cpu):.2f} us CPU/event")
    for name, _ in trees:
        print(f"{name}: Consumer median {statistics.median(rates[name]):,.0f} events/s, "
              f"ratio to the SQL loop median {statistics.median(ratios[name]):.3f}, "
              f"{statistics.median(cpus[name]):.2f} us CPU/event in the client")


if __name__ == "__main__":
    main()
