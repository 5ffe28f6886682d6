"""Nightly reports: long jobs on several workers, with progress and automatic retry.

Six report jobs are queued; two workers of the share consumer "reports" (subscribed with
``share=True``: any idle worker takes the next job) take different jobs, report their progress
(percent, stage, counters) while they run, and the "inventory" report fails once: it is
retried automatically after a short delay and then succeeds.  Meanwhile the main thread watches
the view pglogq.in_flight, as `pglogq status` or a dashboard would.  Run it:

    python examples/report_jobs.py        # PGLOGQ_DSN, else the embedded PostgreSQL

It creates (or reuses) the queue "report_jobs_demo" and drops it at the end.  In production each
worker is its own process (``pglogq worker myapp.reports:consumer --concurrency 4``: four jobs
at once), on as many machines as needed, and the pglogq-ticker daemon ticks and pumps retries.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pglogq

# test-expects: inventory failed on try 1 (warehouse database timed out): it will be retried
# test-expects: inventory done on try 2
# test-expects: all 6 reports done by 2 workers
# test-expects: progress was visible in pglogq.in_flight for all 6 reports

QUEUE = "report_jobs_demo"
REPORTS = ["sales", "inventory", "payroll", "traffic", "churn", "invoices"]
STAGES = ["querying", "rendering", "uploading"]


def make_worker(client: pglogq.Client, name: str, done: list[tuple[str, str, int]]) -> pglogq.Consumer:
    worker = pglogq.Consumer(
        client, QUEUE, "reports",
        worker=name,  # its handler slot is named f"{name}-0" (one job at a time)
        retry_policy=pglogq.RetryPolicy.fixed(timedelta(seconds=0.3)),
        heartbeat_interval=0.5,  # keep well under the queue's dead_interval
        poll_interval=0.2,
    )

    @worker.handler("report.generate")
    def generate(msg: pglogq.Delivery) -> None:
        report = msg.payload["report"]
        for i, stage in enumerate(STAGES):
            msg.progress(100 * i / len(STAGES), stage=stage, counters={"rows": (i + 1) * 1000})
            time.sleep(0.15)  # the real work
            if report == "inventory" and msg.retry_count == 0 and stage == "rendering":
                print(f"  {report} failed on try 1 (warehouse database timed out): it will be retried")
                raise RuntimeError("warehouse database timed out")
        msg.progress(100, stage="done")
        done.append((report, msg.worker, msg.retry_count))
        print(f"  {report} done on try {msg.retry_count + 1} by {msg.worker}")

    return worker


def main() -> None:
    with pglogq.Client() as client:
        client.install_schema()  # idempotent
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "reports", share=True)  # jobs: any idle worker takes the next one
        client.set_queue_config(QUEUE, "dead_interval", "10 seconds")  # a silent worker loses its job
        for report in REPORTS:
            client.send(QUEUE, {"report": report}, type="report.generate")
            client.tick(QUEUE, force=True)

        # ticks and the retry pump (the pglogq-ticker daemon does this in production)
        ticker = pglogq.start_ticker(client, maint_interval=0.1)
        done: list[tuple[str, str, int]] = []
        workers = [make_worker(client, f"worker-{i}", done) for i in (1, 2)]
        threads = [threading.Thread(target=w.run) for w in workers]
        for t in threads:
            t.start()

        seen: set[int] = set()
        last: dict[int, str] = {}
        deadline = time.monotonic() + 60
        while len(done) < len(REPORTS) and time.monotonic() < deadline:
            for row in client.in_flight(QUEUE):
                seen.add(row.msg_id)
                line = f"{row.percent or 0:3.0f}% {row.stage}"
                if last.get(row.msg_id) != line:
                    last[row.msg_id] = line
                    print(f"    in flight: msg {row.msg_id} on {row.worker}: {line} {row.counters}")
            time.sleep(0.05)

        for w in workers:
            w.stop()
        for t in threads:
            t.join()
        ticker.stop()
        by = {worker for _, worker, _ in done}
        print(f"all {len(done)} reports done by {len(by)} workers")
        print(f"progress was visible in pglogq.in_flight for all {len(seen)} reports")
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
