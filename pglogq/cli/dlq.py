"""``pglogq dlq``: inspect, show, replay and purge dead letters."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from pglogq.cli import queries as cq
from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.confirm import confirm, yes_option
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import ago, console, emit_json, fmt, print_table, short
from pglogq.cli.params import Int8, duration_callback
from pglogq.errors import UnknownDeadLetter, translate

F = TypeVar("F", bound=Callable[..., Any])
CHUNK = 500
COLUMNS = ["dead_id", "queue", "consumer", "msg_id", "type", "payload", "headers", "retry_count",
           "reason", "created_at", "first_failed_at", "failed_at"]


def filter_options(f: F) -> F:
    f = click.option("--older-than", callback=duration_callback, metavar="DURATION",
                     help="Only dead letters failed at least this long ago (e.g. 1h, 7d).")(f)
    f = click.option("--type", "type_", metavar="TYPE", help="Only events of this type.")(f)
    f = click.option("--consumer", "-c", metavar="NAME", help="Only this consumer's dead letters.")(f)
    return f


def _filters(queue: str, consumer: str | None, type_: str | None, older_than: timedelta | None) -> dict[str, Any]:
    return {"queue": queue, "consumer": consumer, "type": type_, "older_than": older_than}


def _run(app: App, query: Any, params: Any) -> list[Any]:
    import psycopg

    try:
        return app.conn.execute(query, params).fetchall()
    except psycopg.Error as exc:
        raise translate(exc) from exc


def _count(app: App, f: dict[str, Any]) -> int:
    """How many dead letters the filters match (PQ001/PQ002 for an unknown queue or consumer)."""
    return int(_run(app, cq.DLQ_COUNT, f)[0][0])


def _describe(f: dict[str, Any]) -> str:
    parts = [f"queue {f['queue']!r}"]
    if f["consumer"]:
        parts.append(f"consumer {f['consumer']!r}")
    if f["type"]:
        parts.append(f"type {f['type']!r}")
    if f["older_than"] is not None:
        parts.append(f"failed over {fmt(f['older_than'])} ago")
    return ", ".join(parts)


@click.group()
@common_options
def dlq() -> None:
    """Inspect, replay and purge dead letters (events that failed too often)."""


@dlq.command()
@click.argument("queue")
@filter_options
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True, help="Show at most this many.")
@common_options
@json_option
@pass_app
def inspect(app: App, queue: str, consumer: str | None, type_: str | None, older_than: timedelta | None,
            limit: int) -> None:
    """List dead letters of QUEUE, oldest first.

    JSON: [{"dead_id", "queue", "consumer", "msg_id", "type", "payload", "headers",
    "retry_count", "reason", "created_at", "first_failed_at", "failed_at", "attempts"}] (attempts: the
    attempt count, retry_count + 1, as lookup and the dashboard count it)
    """
    f = _filters(queue, consumer, type_, older_than)
    found = _run(app, cq.DLQ_INSPECT, {**f, "limit": limit})
    rows = [_with_attempts(dict(zip(COLUMNS, r, strict=True))) for r in found]
    if app.json:
        emit_json(rows)
        return
    print_table(
        ["id", "consumer", "msg", "type", "attempts", "failed", "reason"],
        [[r["dead_id"], r["consumer"], r["msg_id"], r["type"], r["retry_count"] + 1, ago(r["failed_at"]),
          short(r["reason"] or "-", 30)] for r in rows],
        right=["id", "msg", "attempts"],
        empty=f"no dead letters ({_describe(f)})",
    )
    if len(rows) == limit:
        click.echo(f"(first {limit}; use --limit or filters to see more)")


def _with_attempts(row: dict[str, Any]) -> dict[str, Any]:
    """A dead letter's row with its attempt count (every delivery whose handler ran)."""
    row["attempts"] = row["retry_count"] + 1
    return row


@dlq.command()
@click.argument("dead_id", type=Int8("dead letter id"))
@common_options
@json_option
@pass_app
def show(app: App, dead_id: int) -> None:
    """Show dead letter DEAD_ID in full (payload, headers, reason).

    JSON: one object with the keys of `dlq inspect`.
    """
    try:
        rows = _run(app, cq.DLQ_SHOW, (dead_id,))
    except UnknownDeadLetter as exc:
        raise CliError(f"unknown dead letter {dead_id}", Exit.NOT_FOUND,
                       hint="it may have been replayed or purged") from exc
    r = _with_attempts(dict(zip(COLUMNS, rows[0], strict=True)))
    if app.json:
        emit_json(r)
        return
    for k in [*COLUMNS, "attempts"]:
        if k in ("payload", "headers"):
            continue
        click.echo(f"{k:>16}  {fmt(r[k])}")
    click.echo(f"{'headers':>16}  {json.dumps(r['headers'])}")
    click.echo(f"{'payload':>16}")
    click.echo(json.dumps(r["payload"], indent=2))


@dlq.command()
@click.argument("dead_ids", type=Int8("dead letter id"), nargs=-1, required=True)
@common_options
@json_option
@pass_app
def replay(app: App, dead_ids: tuple[int, ...]) -> None:
    """Send dead letters DEAD_IDS back to the consumer that dead-lettered each (only to it).

    All in one transaction: when one is unknown, none is replayed.

    JSON: {"replayed": [{"dead_id": int, "msg_id": int}]}
    """
    out = []
    with app.conn.transaction():  # all or nothing
        for d in dead_ids:
            out.append({"dead_id": d, "msg_id": app.client.dlq_replay(d, conn=app.conn)})
    if app.json:
        emit_json({"replayed": out})
        return
    for r in out:
        click.echo(f"dead letter {r['dead_id']} replayed: message {r['msg_id']} is back in its consumer's queue")


def _progress(total: int) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console(stderr=True), transient=True, disable=total < CHUNK)


@dlq.command("replay-all")
@click.argument("queue")
@filter_options
@click.option("--max", "max_", type=click.IntRange(1, 2**31 - 1), metavar="N",
              help="Replay at most N dead letters, oldest first (default: all that match).")
@yes_option
@common_options
@json_option
@pass_app
def replay_all(app: App, queue: str, consumer: str | None, type_: str | None, older_than: timedelta | None,
               max_: int | None, yes: bool) -> None:
    """Replay every dead letter of QUEUE that matches the filters (asks first).

    Each goes back to the consumer that dead-lettered it only, oldest first, at most as many
    as were counted before asking (and at most --max); a dead letter replayed or purged
    meanwhile by someone else is skipped.  Runs pglogq.dlq_replay_all in chunks, with a progress
    bar for long runs.

    JSON: {"queue": str, "matched": int, "replayed": int, "skipped": int} (matched: all that
    match the filters; skipped: of the min(matched, --max) planned, those gone meanwhile)
    """
    f = _filters(queue, consumer, type_, older_than)
    matched = _count(app, f)
    total = matched if max_ is None else min(matched, max_)
    if total == 0:
        if app.json:
            emit_json({"queue": queue, "matched": 0, "replayed": 0, "skipped": 0})
        else:
            click.echo(f"no dead letters ({_describe(f)})")
        return
    confirm(f"Replay {total} dead letter(s) ({_describe(f)})?", yes=yes)
    # pglogq.dlq_replay_all, CHUNK at a time (oldest first, each chunk its own statement): a
    # dead letter replayed or purged meanwhile by someone else is skipped by the function
    replayed = 0
    with _progress(total) as bar:
        task = bar.add_task("replaying", total=total)
        while replayed < total:
            n = int(_run(app, cq.DLQ_REPLAY_ALL, {**f, "limit": min(CHUNK, total - replayed)})[0][0])
            if n == 0:
                break
            replayed += n
            bar.advance(task, n)
    skipped = total - replayed
    if app.json:
        emit_json({"queue": queue, "matched": matched, "replayed": replayed, "skipped": skipped})
    else:
        click.echo(f"replayed {replayed} dead letter(s) of {queue!r}"
                   + (f"; {skipped} were gone already" if skipped else ""))


@dlq.command()
@click.argument("queue")
@filter_options
@yes_option
@common_options
@json_option
@pass_app
def purge(app: App, queue: str, consumer: str | None, type_: str | None, older_than: timedelta | None,
          yes: bool) -> None:
    """Delete the dead letters of QUEUE that match the filters, for good (asks first).

    JSON: {"queue": str, "purged": int}
    """
    f = _filters(queue, consumer, type_, older_than)
    total = _count(app, f)
    if total == 0:
        if app.json:
            emit_json({"queue": queue, "purged": 0})
        else:
            click.echo(f"no dead letters ({_describe(f)})")
        return
    confirm(f"Delete {total} dead letter(s) ({_describe(f)}) for good?", yes=yes)
    n = int(_run(app, cq.DLQ_PURGE, f)[0][0])
    if app.json:
        emit_json({"queue": queue, "purged": n})
    else:
        click.echo(f"purged {n} dead letter(s) of {queue!r}")
