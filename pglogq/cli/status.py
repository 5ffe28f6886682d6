"""``pglogq status``: queues, consumers, in-flight work and what needs attention."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import click
from rich.console import Group
from rich.text import Text

from pglogq import health
from pglogq.cli import queries as cq
from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.consumer import lease_rows, share_table
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import ago, console, duration, emit_json, emit_json_line, jsonable, short, size, table
from pglogq.cli.params import Seconds, duration_callback
from pglogq.models import Schedule

SCHEDULES_SHOWN = 10
"""Schedules status lists at most (the soonest due); it counts the others."""


@dataclass(frozen=True)
class _InFlight:
    """A row of the pglogq.in_flight view as the health rules read it."""

    queue_name: str
    consumer_name: str
    worker: str | None
    msg_id: int | None
    silent_for: timedelta


def collect(app: App, queue: str | None, thresholds: health.Thresholds) -> dict[str, Any]:
    """Everything status shows, as plain data (the --json document)."""
    client, conn = app.client, app.conn
    queues = client.queue_info(queue, conn=conn)
    consumers = client.consumer_info(queue, conn=conn)
    in_flight: list[dict[str, Any]] | None = None
    row = conn.execute(cq.IN_FLIGHT_EXISTS).fetchone()
    if row and row[0]:
        cur = conn.execute(cq.IN_FLIGHT)
        assert cur.description is not None
        names = [d.name for d in cur.description]
        in_flight = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        if queue is not None:
            in_flight = [r for r in in_flight if r.get("queue", r.get("queue_name", queue)) == queue]
    ticker_last_run: datetime | None = None
    row = conn.execute(cq.TICKER_INFO_EXISTS).fetchone()
    if row and row[0]:
        trow = conn.execute(cq.TICKER_INFO).fetchone()
        ticker_last_run = trow[0] if trow else None
    schedules: list[Schedule] | None = None
    schedules_total: int | None = None
    row = conn.execute(cq.SCHEDULES_VISIBLE).fetchone()
    if row and row[0]:
        # the soonest few: a deployment with thousands of schedules shows a screen, not all of them
        schedules = client.schedule_list(queue, max_rows=SCHEDULES_SHOWN, conn=conn)
        schedules_total = len(schedules)
        if len(schedules) == SCHEDULES_SHOWN and row[1]:
            crow = conn.execute(cq.SCHEDULE_COUNT, (queue,)).fetchone()
            schedules_total = int(crow[0]) if crow else schedules_total
    # the leases of share consumers, when one holds any (an ordinary consumer has none)
    leases = (client.leases(queue, conn=conn)
              if any(c.in_flight_events or c.expired_leases for c in consumers) else [])
    flights = [_InFlight(str(r.get("queue_name")), str(r.get("consumer_name")), r.get("worker"), r.get("msg_id"),
                         r["silent_for"])
               for r in in_flight or [] if isinstance(r.get("silent_for"), timedelta)]
    findings = health.assess(queues, consumers, flights, thresholds=thresholds,
                             now=datetime.now().astimezone())
    return {
        "queues": queues,
        "consumers": consumers,
        "in_flight": in_flight,
        "leases": leases,
        "schedules": schedules,
        "schedules_total": schedules_total,
        "ticker_last_run": ticker_last_run,
        "warnings": [f.as_dict() for f in findings],
    }


def render(data: dict[str, Any]) -> Group:
    parts: list[Any] = []
    q_tab = table(
        ["queue", "ev/s", "last tick", "unticked", "size", "dead", "retry"],
        [[q.queue_name + (" (paused)" if q.paused else ""), q.events_per_second, duration(q.last_tick_age),
          q.pending_estimate, size(q.size_bytes), q.dead_letters, q.retry_depth] for q in data["queues"]],
        title="Queues", right=["ev/s", "last tick", "unticked", "size", "dead", "retry"], overflow="ellipsis",
    )
    parts.append(q_tab if data["queues"] else Text("no queues"))
    if data["consumers"]:
        parts.append(table(
            ["queue", "consumer", "pending", "lag", "unread", "seen", "open"],
            [[c.queue_name, c.consumer_name, c.pending_events, duration(c.lag), c.lag_events,
              ago(c.last_seen), c.open_batches] for c in data["consumers"]],
            title="Consumers", right=["pending", "lag", "unread", "seen", "open"], overflow="ellipsis",
        ))
        parts.append(share_table(data["consumers"]))
    if data.get("leases"):
        parts.append(table(*lease_rows(data["leases"]), title="Leases (share consumers)",
                           right=["events", "started", "deliveries"], overflow="ellipsis"))
    if data["in_flight"]:
        # the columns that fit 80: who, what, for how long, how far; the rest is in --json
        parts.append(table(
            ["consumer", "worker", "msg", "try", "running", "silent", "progress"],
            [[f"{r.get('queue_name')}/{r.get('consumer_name')}", short(str(r.get("worker") or "-"), 22),
              r.get("msg_id"), r.get("delivery_count") or "-", duration(r.get("running_for")),
              duration(r.get("silent_for")), _progress(r)] for r in data["in_flight"]],
            title="In flight", right=["msg", "try", "running", "silent"], overflow="ellipsis",
        ))
    if data.get("schedules"):
        now = datetime.now().astimezone()
        parts.append(table(
            ["queue", "schedule", "cron", "next run"],
            [[r.queue_name, short(r.name, 24), short(r.cron, 24),
              "not planned yet" if r.next_due is None
              else ("due now" if r.next_due <= now else "in " + duration(r.next_due - now))]
             for r in data["schedules"]],
            title="Schedules", right=["next run"], overflow="ellipsis",
        ))
        more = (data.get("schedules_total") or 0) - len(data["schedules"])
        if more > 0:
            parts.append(Text(f"... and {more} more schedules (pglogq schedule list)"))
    if data["warnings"]:
        for w in data["warnings"]:
            problem = w["kind"] not in health.INFORMATION
            parts.append(Text(("! " if problem else "- ") + w["message"], style="bold yellow" if problem else ""))
    else:
        parts.append(Text("ok: ticker keeping up, rotation not blocked, no stale consumer"))
    spaced: list[Any] = []
    for p in parts:
        if p is not None:
            spaced += [p, Text("")]
    return Group(*spaced[:-1])


def _progress(r: dict[str, Any]) -> str:
    pct = r.get("percent")
    stage = r.get("stage")
    text = " ".join(x for x in (f"{float(pct):.0f}%" if pct is not None else "", str(stage) if stage else "") if x)
    return short(text, 20) if text else "-"


def to_json(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "queues": [jsonable(q) for q in data["queues"]],
        "consumers": [jsonable(c) for c in data["consumers"]],
        "in_flight": jsonable(data["in_flight"]),
        "leases": [jsonable(x) for x in data.get("leases") or []],
        "schedules": None if data.get("schedules") is None
                     else [jsonable(r) for r in data["schedules"]],
        "schedules_total": data.get("schedules_total"),
        "ticker_last_run": jsonable(data["ticker_last_run"]),
        "warnings": data["warnings"],
    }


@click.command()
@click.argument("queue", required=False)
@click.option("--watch", type=Seconds(), is_flag=False, flag_value=2.0, default=None, metavar="SECONDS",
              help="Refresh every SECONDS (2 if not given) until Ctrl-C.")
@click.option("--count", type=click.IntRange(1), help="With --watch: stop after this many refreshes.")
@click.option("--stall-after", callback=duration_callback, default="10s", show_default=True, metavar="DURATION",
              help="Warn when committed events have waited this long for a tick.")
@click.option("--stale-after", callback=duration_callback, default="1m", show_default=True, metavar="DURATION",
              help="Warn when a consumer with work left has not been seen for this long (and no worker of it"
                   " reports).")
@click.option("--silent-after", callback=duration_callback, default="1m", show_default=True, metavar="DURATION",
              help="Warn when a worker with an event in flight has not reported for this long.")
@click.option("--lag-after", callback=duration_callback, default=None, metavar="DURATION",
              help="Warn when a consumer's lag (age of its oldest pending event) exceeds this.")
@click.option("--max-pending", type=click.IntRange(0), default=None, metavar="N",
              help="Warn when a consumer has more than N events not yet acknowledged.")
@click.option("--fail-on-dead", is_flag=True, help="Warn when a queue holds any dead letter.")
@click.option("--check", is_flag=True, help="Exit 11 when there is a warning other than a paused queue"
              " (for monitoring scripts; exit 0 when there is none).")
@common_options
@json_option
@pass_app
def status(app: App, queue: str | None, watch: float | None, count: int | None, stall_after: timedelta,
           stale_after: timedelta, silent_after: timedelta, lag_after: timedelta | None, max_pending: int | None,
           fail_on_dead: bool, check: bool) -> None:
    """Show queues, consumers, in-flight events, ticker health and blocked rotation.

    Queues: event rate, age of the last tick, events not ticked yet, size on disk, dead
    letters.  Consumers: pending (events ticked, not yet acknowledged), lag (age of the oldest
    pending event), unread (ticked, not yet handed to a worker: JSON lag_events), last seen, open batches, and
    for a share consumer its leased events (and leases past expiry).  Leases (when a share
    consumer holds any): each worker's lease, its events, lock expiry and delivery counts.
    In flight (when the pglogq.in_flight view exists): each running event with its worker,
    delivery count ("try") and progress.  Schedules (when any, for a role that may list them): name, queue, cron and
    next run of the 10 soonest due, and how many more there are.  Warnings: no tick while
    events wait (is a ticker running?), rotation blocked and by what, consumers behind and
    silent, workers silent with an event in flight.

    JSON: {"queues": [queue list objects], "consumers": [consumer list objects],
    "in_flight": [objects]|null, "leases": [consumer leases objects],
    "schedules": [schedule list objects, the 10 soonest due]|null (null: not readable by this
    role), "schedules_total": int|null, "ticker_last_run": str|null,
    "warnings": [{"kind", "queue", "consumer", "message"}]}; with --watch one compact
    document per line.  Warning kinds (the same rules as the dashboard's warnings and the
    ticker's pglogq_health_warning metric): paused (information only), ticker_stalled,
    rotation_blocked, consumer_stale, worker_silent, lease_expired; with their options dead_letters,
    consumer_lagging, backlog.

    With --check: exit 0 when nothing but paused queues is reported, 11 when anything else is.
    """
    thresholds = health.Thresholds(stall_after=stall_after, stale_after=stale_after, silent_after=silent_after,
                                   lag_after=lag_after, max_pending=max_pending, fail_on_dead=fail_on_dead)
    n = 0
    data: dict[str, Any] = {}
    try:
        while True:
            data = collect(app, queue, thresholds)
            n += 1
            if app.json:
                (emit_json_line if watch else emit_json)(to_json(data))
            else:
                out = console()
                if watch and out.is_terminal:
                    out.clear()
                if watch:
                    out.print(Text(f"pglogq status — {datetime.now():%H:%M:%S} (every {watch:g}s, Ctrl-C to stop)"))
                out.print(render(data))
            if not watch or (count is not None and n >= count):
                break
            time.sleep(watch)
    except KeyboardInterrupt:
        pass
    if check:
        problems = [w for w in data.get("warnings", []) if w["kind"] not in health.INFORMATION]
        if problems:
            raise CliError(f"{len(problems)} problem(s): " + "; ".join(w["message"] for w in problems),
                           Exit.CHECK_FAILED)
