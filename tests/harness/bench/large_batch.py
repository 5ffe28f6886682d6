"""Scenario 6, one large batch: N events sent with no tick in between (the ticker is not
running), then one tick; drained by a consumer in its own process, whose time and peak memory
(RSS) are reported."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.harness import child_env
from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.systems import Pglogq, System
from tests.harness.bench.systems.pglogq_system import preload

SCENARIO = "large_batch"
PAGE = 1000  # the consumer's max_messages: memory is bounded by the page, not by the batch


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    n = ctx.settings.large_batch_events
    modes = (("consumer", "pglogq (Python Consumer)"), ("client", "pglogq (Client.receive/ack)"))
    for mode, name in modes:
        queue = f"large_{mode}"
        with ctx.client() as c:
            c.create_queue(queue)
            c.subscribe(queue, "c")
            t0 = time.time()
            preload(c, queue, n, tick_every=0, chunk=10_000)
            load_s = time.time() - t0
            ticks = ctx.sql("SELECT count(*) FROM pglogq.tick t JOIN pglogq.queue q USING (queue_id) "
                            "WHERE q.queue_name = %s", (queue,))[0][0]
        proc = subprocess.run(
            [sys.executable, "-m", "tests.harness.bench.large_batch_child", ctx.dsn, queue, "c", mode, str(PAGE)],
            capture_output=True, text=True, timeout=1800, env=child_env(),
        )
        for s in systems:
            if isinstance(s, Pglogq):
                s.cleanup()
        if proc.returncode != 0:
            ctx.results.skip(SCENARIO, name, f"the consumer process failed: {proc.stderr.strip()[-300:]}")
            continue
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        case = f"{n:,} events in one batch"
        extra = {"events": n, "drained": out["count"], "load_seconds": round(load_s, 2), "ticks": ticks,
                 "page": PAGE, "rss_start_mb": out["rss_start_kb"] / 1024}
        ctx.results.add(Measure(SCENARIO, f"{case}: drain time", name, out["seconds"], "s",
                                higher_is_better=False, extra=extra))
        ctx.results.add(Measure(SCENARIO, f"{case}: drain rate", name, out["count"] / out["seconds"],
                                "events/s", extra=extra))
        ctx.results.add(Measure(SCENARIO, f"{case}: consumer RSS before draining", name,
                                out["rss_start_kb"] / 1024, "MB", higher_is_better=False, extra=extra))
        ctx.results.add(Measure(SCENARIO, f"{case}: consumer peak RSS", name, out["rss_peak_kb"] / 1024, "MB",
                                higher_is_better=False, extra=extra))
        if out["count"] != n:
            ctx.results.note(SCENARIO, f"{name} drained {out['count']:,} of {n:,} events")
