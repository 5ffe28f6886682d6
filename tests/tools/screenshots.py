"""Screenshots of every dashboard page, for docs/how-to/dashboard.md.

``python -m tests.tools.screenshots [--dsn SERVER_DSN] [--out docs/how-to/img]``

Makes a scratch database on the server (``--dsn``, else ``PGLOGQ_DSN``, else the embedded
PostgreSQL), fills it with a small scene (queues, a stuck consumer, a long job at 60 %, dead
letters with a script in one payload), serves the dashboard and photographs each page with
Debian's Chromium (``/usr/bin/chromium``, driven by Playwright), then drops the database.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq
from pglogq.dashboard import Thresholds, create_app
from pglogq.dsn import resolve_dsn
from tests.support.dashboard import CHROMIUM, SCRIPT, LongJob, make_dead_letters, make_stuck_consumer, serve

ROOT = Path(__file__).resolve().parents[2]
DB = "pglogq_screenshots"
TOKEN = "screenshot-token-123"
PAGES = [
    # (file, path, what to do before the shot)
    ("dashboard-overview.png", "/", None),
    ("dashboard-queue.png", "/queues/reports", None),
    ("dashboard-dlq.png", "/queues/orders/dlq?type=order.created", "open-first"),
    ("dashboard-dlq-confirm.png", "/queues/orders/dlq/confirm?op=replay_all&consumer=mailer", None),
    ("dashboard-lookup.png", "/lookup?queue=orders&msg_id={dead}", None),
    ("dashboard-seek.png", "/queues/orders/seek?consumer=billing&by_events=-40", None),
]


@contextmanager
def scratch_database(server: str) -> Iterator[str]:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB}"')
    try:
        yield make_conninfo(server, dbname=DB)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')


def scene(c: pglogq.Client, dsn: str) -> tuple[LongJob, int]:
    c.install_schema()
    for q in ("orders", "reports", "emails"):
        c.create_queue(q)
    c.subscribe("orders", "billing")
    c.subscribe("emails", "sender")
    for i in range(40):
        c.send("orders", {"order": 1000 + i, "total": 19.9 + i}, type="order.created")
    c.tick("orders", force=True)
    dead = make_dead_letters(
        c, "orders", "billing",
        [{"order": 7, "customer": {"id": 42, "name": "Ada"}, "lines": [{"sku": "A-1", "qty": 2}]},
         {"order": 8, "note": SCRIPT}, {"order": 9, "blob": "x" * 2600}],
        type="order.created", reason="payment gateway timeout", headers={"trace_id": "4bf92f3577b34da6"})
    make_stuck_consumer(c, "orders", "mailer")
    job = LongJob(dsn, "reports", "builder", steps=10, stepped=True, worker="reports-worker-2").start()
    for _ in range(5):
        job.step()
    return job, dead[0]


def warm_up(c: pglogq.Client, base: str, page: object, job: LongJob, rounds: int = 12) -> None:
    """A few minutes of history in a few seconds: sends, ticks and samples, for the sparklines."""
    for i in range(rounds):
        if i in (4, 8):
            job.step()
        c.send_batch("orders", [{"n": j} for j in range(5 + 7 * (i % 4))])
        c.send_batch("emails", [{"n": j} for j in range(3 + i)])
        c.tick("orders", force=True)
        c.tick("emails", force=True)
        for queue, consumer in (("emails", "sender"), ("orders", "billing")):
            if i % 3 == 0 or consumer == "billing":
                batch = c.receive(queue, consumer)
                if batch:
                    batch.ack()
        page.goto(base)  # type: ignore[attr-defined]
        time.sleep(0.15)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--dsn", help="a server to make the scratch database on (default: the DSN rule)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "how-to" / "img")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with scratch_database(resolve_dsn(args.dsn)) as dsn, pglogq.Client(dsn) as c:
        job, dead = scene(c, dsn)
        app = create_app(dsn, actions=True, token={"ada": TOKEN}, refresh=5, sample_interval=0.1,
                         thresholds=Thresholds(stuck_after=timedelta(seconds=3)))
        with pglogq.start_ticker(dsn), serve(app) as base, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1280, "height": 760}, device_scale_factor=1)
            page.goto(f"{base}/login")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            warm_up(c, base, page, job)
            for name, path, how in PAGES:
                page.goto(base + path.format(dead=dead))
                if how == "open-first":
                    page.locator("article.dead", has_text="customer").locator("summary").click()
                page.screenshot(path=str(args.out / name))
                print(f"{args.out / name}: {(args.out / name).stat().st_size // 1024} kB")
            browser.close()
        for _ in range(5):
            job.step()
        job.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
