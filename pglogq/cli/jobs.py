"""``pglogq job show``, ``pglogq jobs`` and ``pglogq schedule``: where events stand, and periodic sends."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from typing import Any

import click

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import ago, console, emit_json, fmt, print_table, short
from pglogq.cli.params import Int8, duration_callback
from pglogq.models import JobState

STATES = ["waiting", "in-flight", "retry", "dead"]
FINISHED = ["finished", "done", "failed", "cancelled", "stopped", "skipped"]
"""The outcome log's states for ``jobs --state`` (newest first)."""


def _job_row(j: JobState) -> dict[str, Any]:
    row = asdict(j)
    if row.get("cursor") is None:
        row.pop("cursor", None)
    return row


def _took(started: datetime | None, finished: datetime | None) -> str:
    if started is None or finished is None:
        return "-"
    return fmt(finished - started)


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
    if j.finished_at is not None:
        parts = [f"attempt {j.attempts}"] if j.attempts else []
        if j.worker:
            parts.append(f"worker {j.worker}")
        parts.append(f"finished {ago(j.finished_at)}")
        if j.since is not None:
            parts.append(f"took {_took(j.since, j.finished_at)}")
        if j.reason:
            parts.append(f"error: {short(j.reason, 40)}")
        return ", ".join(parts)
    return ""


@click.group()
@common_options
def job() -> None:
    """Look at one event (job): where it stands for every consumer, its history, its result."""


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
    retry (due, attempts, last reason), dead (dead letter id, reason), cancelled, done
    (worker, start, finish), stopped (returned after a stop request), skipped (the
    consumer's cursor moved past it), gone (not stored: rotated away, rolled back, not
    committed yet, or a delayed send cancelled; the detail says which).  Then every
    attempt of the consumers' outcome logs (worker, start, duration, outcome, error).

    JSON: [{"consumer", "state", "msg_id", "type", "created_at", "worker", "since",
    "last_heartbeat", "percent", "stage", "due_at", "attempts", "reason", "dead_id", "detail",
    "finished_at", "result", "history": [{"attempt", "outcome", "worker", "started_at",
    "finished_at", "error"}]}]
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
    attempts = [(j.consumer, h) for j in rows for h in j.history]
    if attempts:
        click.echo("history (the consumers' outcome logs, oldest first):")
        print_table(
            ["consumer", "attempt", "outcome", "worker", "started", "took", "error"],
            [[c, h.attempt, h.outcome, h.worker or "-", fmt(h.started_at) if h.started_at else "-",
              _took(h.started_at, h.finished_at), short(h.error or "-", 40)] for c, h in attempts],
            right=["attempt"],
        )
    for j in rows:
        if j.result is not None:
            click.echo(f"result ({j.consumer}): {short(json.dumps(j.result, default=str), 200)}")


@job.command()
@click.argument("queue")
@click.argument("msg_id", type=Int8("message id"))
@click.option("--consumer", "-c", "consumer", required=True, metavar="NAME",
              help="The consumer whose outcome to wait for.")
@click.option("--timeout", callback=duration_callback, default="30s", show_default=True, metavar="DURATION",
              help="How long to wait (e.g. 500ms, 30s, 5m; 0: look once).")
@common_options
@json_option
@pass_app
def wait(app: App, queue: str, msg_id: int, consumer: str, timeout: timedelta) -> None:
    """Wait until consumer NAME finished event MSG_ID of QUEUE for good; print its result.

    Waits with LISTEN (no polling) for a final outcome: done or stopped (exit 0, the
    handler's stored result printed as JSON), dead or cancelled (exit 12); none within
    --timeout: exit 13.  The consumer must record outcomes (the Consumer runtime does).

    JSON: {"queue", "consumer", "msg_id", "outcome", "final", "attempt", "worker", "started_at",
    "finished_at", "error", "result"}; on timeout {"queue", "consumer", "msg_id", "outcome": null}
    """
    got = app.client.result(queue, msg_id, consumer, timeout=timeout)
    if got is None:
        if app.json:
            emit_json({"queue": queue, "consumer": consumer, "msg_id": msg_id, "outcome": None})
        raise CliError(f"event {msg_id} of queue {queue!r} has no final outcome for consumer {consumer!r} "
                       f"after {fmt(timeout)}", Exit.TIMED_OUT)
    if app.json:
        emit_json(asdict(got))
    elif got.outcome in ("done", "stopped"):
        click.echo(json.dumps(got.result, default=str) if got.result is not None else "null")
    if got.outcome not in ("done", "stopped"):
        raise CliError(f"event {msg_id} of queue {queue!r} ended {got.outcome} for consumer {consumer!r}"
                       + (f" after {got.attempt} attempt(s): {short(got.error, 200)}" if got.error else ""),
                       Exit.JOB_FAILED)


@click.command()
@click.argument("queue")
@click.option("--consumer", "-c", metavar="NAME", help="Only this consumer's events.")
@click.option("--type", "type_", metavar="TYPE", help="Only events of this type.")
@click.option("--state", type=click.Choice(STATES + FINISHED),
              help="Only events in this state (default: the four not done); finished, done, failed, cancelled, "
                   "stopped, skipped: the consumers' outcome logs, newest first.")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True,
              help="Rows per page.")
@click.option("--after", metavar="CURSOR", help="Continue after this cursor (printed at the end of a full page).")
@click.option("--since", "since", callback=duration_callback, metavar="DURATION",
              help="Finished states only: finished within this long before now (e.g. 1h).")
@common_options
@json_option
@pass_app
def jobs(app: App, queue: str, consumer: str | None, type_: str | None, state: str | None, limit: int,
         after: str | None, since: timedelta | None) -> None:
    """List the events of QUEUE that are not done yet, per consumer, a page at a time.

    In-flight first, then retry, dead and waiting (in delivery order).  A full page ends with
    the --after CURSOR that shows the next one.  --state finished (or one outcome) lists the
    finished handler runs of the consumers' outcome logs instead, newest first.

    JSON: {"jobs": [{"consumer", "state", "msg_id", "type", "created_at", "worker", "since",
    "last_heartbeat", "percent", "stage", "due_at", "attempts", "reason", "dead_id", "cursor",
    "finished_at", "result", "history"}], "next": cursor or null}
    """
    if since is not None and state not in FINISHED:
        raise CliError("--since applies to the finished states only (--state finished, done, ...)", Exit.USAGE)
    start = datetime.now(timezone.utc) - since if since is not None else None
    rows = app.client.jobs(queue, consumer, type=type_, state=state, limit=limit, after=after, since=start,
                           conn=app.conn)
    nxt = rows[-1].cursor if len(rows) == limit else None
    if app.json:
        emit_json({"jobs": [_job_row(j) for j in rows], "next": nxt})
        return
    print_table(
        ["consumer", "state", "msg", "type", "sent", "details"],
        [[j.consumer, j.state, j.msg_id, j.type or "-", ago(j.created_at), _what(j)] for j in rows],
        right=["msg"],
        empty=("nothing finished" if state in FINISHED else "nothing waiting, in flight, retried or dead")
        + (" after that cursor" if after else ""),
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
