"""``pglogq job show``, ``pglogq jobs`` and ``pglogq schedule``: where events stand, and periodic sends."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import ago, console, emit_json, fmt, print_table, short
from pglogq.cli.params import Int8
from pglogq.models import JobState

STATES = ["waiting", "in-flight", "retry", "dead"]


def _job_row(j: JobState) -> dict[str, Any]:
    row = asdict(j)
    if row.get("cursor") is None:
        row.pop("cursor", None)
    return row


def _what(j: JobState) -> str:
    """The state's particulars in a few words."""
    if j.state == "in-flight":
        parts = [f"worker {j.worker}"] if j.worker else []
        if j.since is not None:
            parts.append(f"since {ago(j.since)}")
        if j.percent is not None:
            parts.append(f"{j.percent:g}%")
        if j.stage:
            parts.append(f"stage {j.stage!r}")
        if j.last_heartbeat is not None:
            parts.append(f"heartbeat {ago(j.last_heartbeat)}")
        return ", ".join(parts)
    if j.state == "retry":
        return f"due {fmt(j.due_at)}, {j.attempts} failed, last reason: {short(j.reason or '-', 40)}"
    if j.state == "dead":
        return f"dead letter {j.dead_id} after {j.attempts} deliveries: {short(j.reason or '-', 40)}"
    if j.state == "waiting" and j.due_at is not None:
        return f"delayed until {fmt(j.due_at)}"
    return ""


@click.group()
@common_options
def job() -> None:
    """Look at one event (job): where it stands for every consumer."""


@job.command()
@click.argument("queue")
@click.argument("msg_id", type=Int8("message id"))
@common_options
@json_option
@pass_app
def show(app: App, queue: str, msg_id: int) -> None:
    """Show where event MSG_ID of QUEUE stands, for every consumer.

    \b
    States: waiting, in-flight (worker, since, progress, stage, last heartbeat),
    retry (due, attempts, last reason), dead (dead letter id, reason), cancelled, done,
    skipped (the consumer's cursor moved past it), gone (not stored: rotated away,
    rolled back, not committed yet, or a delayed send cancelled; the detail says which).

    JSON: [{"consumer", "state", "msg_id", "type", "created_at", "worker", "since",
    "last_heartbeat", "percent", "stage", "due_at", "attempts", "reason", "dead_id", "detail"}]
    """
    rows = app.client.lookup(queue, msg_id, conn=app.conn)
    if app.json:
        emit_json([_job_row(j) for j in rows])
        return
    if rows:
        first = rows[0]
        click.echo(f"event {msg_id} of queue {queue}: type {first.type or '-'}, sent {fmt(first.created_at)}")
    print_table(
        ["consumer", "state", "details", "detail"],
        [[j.consumer, j.state, _what(j), j.detail or ""] for j in rows],
        empty=f"queue {queue!r} has no consumer",
    )


@click.command()
@click.argument("queue")
@click.option("--consumer", "-c", metavar="NAME", help="Only this consumer's events.")
@click.option("--type", "type_", metavar="TYPE", help="Only events of this type.")
@click.option("--state", type=click.Choice(STATES), help="Only events in this state (default: all four).")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True,
              help="Rows per page.")
@click.option("--after", metavar="CURSOR", help="Continue after this cursor (printed at the end of a full page).")
@common_options
@json_option
@pass_app
def jobs(app: App, queue: str, consumer: str | None, type_: str | None, state: str | None, limit: int,
         after: str | None) -> None:
    """List the events of QUEUE that are not done yet, per consumer, a page at a time.

    In-flight first, then retry, dead and waiting (in delivery order).  A full page ends with
    the --after CURSOR that shows the next one.

    JSON: {"jobs": [{"consumer", "state", "msg_id", "type", "created_at", "worker", "since",
    "last_heartbeat", "percent", "stage", "due_at", "attempts", "reason", "dead_id", "cursor"}],
    "next": cursor or null}
    """
    rows = app.client.jobs(queue, consumer, type=type_, state=state, limit=limit, after=after, conn=app.conn)
    nxt = rows[-1].cursor if len(rows) == limit else None
    if app.json:
        emit_json({"jobs": [_job_row(j) for j in rows], "next": nxt})
        return
    print_table(
        ["consumer", "state", "msg", "type", "sent", "details"],
        [[j.consumer, j.state, j.msg_id, j.type or "-", ago(j.created_at), _what(j)] for j in rows],
        right=["msg"],
        empty="nothing waiting, in flight, retried or dead" + (" after that cursor" if after else ""),
    )
    if nxt is not None:
        click.echo(f"(more: --after {nxt})")


@click.group()
@common_options
def schedule() -> None:
    """Periodic sends, made by the ticker from cron expressions (UTC)."""


@schedule.command()
@click.argument("queue")
@click.argument("name")
@click.option("--cron", "cron", required=True, metavar="EXPR",
              help="Five fields, in UTC: minute hour day-of-month month day-of-week (e.g. '0 7 * * MON-FRI').")
@click.option("--payload", required=True, metavar="JSON", help="The JSON payload of every event.")
@click.option("--type", "type_", metavar="TYPE", help="The event type.")
@click.option("--headers", metavar="JSON", help="A JSON object of headers for every event.")
@click.option("--priority", type=click.IntRange(0, 32767), default=100, show_default=True)
@click.option("--missed", type=click.Choice(["skip", "catch_up"]), default="skip", show_default=True,
              help="Due times missed while no ticker ran: not sent (skip), or all sent (catch_up).")
@common_options
@json_option
@pass_app
def add(app: App, queue: str, name: str, cron: str, payload: str, type_: str | None, headers: str | None,
        priority: int, missed: str) -> None:
    """Send PAYLOAD to QUEUE at every due time of --cron (schedule NAME).

    The ticker sends each due time exactly once, whatever number of tickers run.

    JSON: {"queue", "name", "added": bool} (false: the same schedule existed already)
    """
    body = _json(payload, "--payload")
    head = _json(headers, "--headers") if headers is not None else None
    added = app.client.schedule_add(queue, name, cron, body, type=type_, headers=head, priority=priority,
                                    missed=missed, conn=app.conn)
    if app.json:
        emit_json({"queue": queue, "name": name, "added": added})
    elif added:
        click.echo(f"schedule {name!r} added to queue {queue!r} ({cron}, UTC)")
    else:
        click.echo(f"schedule {name!r} of queue {queue!r} exists already, unchanged")


@schedule.command("list")
@click.argument("queue", required=False)
@common_options
@json_option
@pass_app
def list_(app: App, queue: str | None) -> None:
    """List the schedules of QUEUE (of every queue without it).

    On a terminal, a table; elsewhere (a pipe, a file) a header line and one line per schedule,
    the fields separated by tabs (a cron expression has spaces), never wrapped.

    JSON: [{"queue_name", "name", "cron", "type", "payload", "headers", "priority", "missed",
    "created_at", "next_due", "last_due", "last_msg_id", "sent", "skipped"}]
    """
    rows = app.client.schedule_list(queue, conn=app.conn)
    if app.json:
        emit_json([asdict(s) for s in rows])
        return
    columns = ["queue", "name", "cron", "type", "missed", "next due", "last due", "sent", "skipped"]
    cells = [[s.queue_name, s.name, s.cron, s.type or "-", s.missed, fmt(s.next_due) if s.next_due else "not planned",
              fmt(s.last_due) if s.last_due else "-", s.sent, s.skipped] for s in rows]
    if not console().is_terminal:
        # 80 columns of table fold every cell of a long name into a column of fragments
        if not cells:
            click.echo("no schedules")
            return
        click.echo("\t".join(c.replace(" ", "_") for c in columns))
        for row in cells:
            click.echo("\t".join(fmt(v).replace("\t", " ") for v in row))
        return
    print_table(columns, cells, right=["sent", "skipped"], empty="no schedules")


@schedule.command()
@click.argument("queue")
@click.argument("name")
@common_options
@json_option
@pass_app
def remove(app: App, queue: str, name: str) -> None:
    """Stop schedule NAME of QUEUE (the events it sent stay).

    JSON: {"queue", "name", "removed": true}
    """
    app.client.schedule_remove(queue, name, conn=app.conn)
    if app.json:
        emit_json({"queue": queue, "name": name, "removed": True})
    else:
        click.echo(f"schedule {name!r} removed from queue {queue!r}")


def _json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"{option} is not valid JSON: {exc}", Exit.INVALID) from exc
