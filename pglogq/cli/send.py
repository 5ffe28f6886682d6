"""``pglogq send``: append one event, or many from JSON lines on stdin."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, TextIO

import click

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import emit_json
from pglogq.cli.params import duration_callback, key_values_callback


def _json_lines(stream: TextIO) -> Iterator[tuple[int, Any]]:
    for n, line in enumerate(stream, 1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as exc:
                raise _BadLine(n, exc.msg) from exc


class _BadLine(Exception):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line
        self.why = why


@click.command()
@click.argument("queue")
@click.argument("payload", required=False)
@click.option("--type", "type_", metavar="TYPE", help="Event type, e.g. order.created.")
@click.option("--header", "headers", multiple=True, callback=key_values_callback, metavar="KEY=VALUE",
              help="A header (repeatable); the value is a string.")
@click.option("--key", metavar="KEY", help="Idempotency key: the same key within the queue's window sends once.")
@click.option("--priority", type=click.IntRange(0, 32767), default=100, show_default=True,
              help="Higher is delivered first when a backlog exists.")
@click.option("--delay", callback=duration_callback, metavar="DURATION",
              help="Deliver no earlier than this from now (10s, 5m).")
@click.option("--batch-size", type=click.IntRange(1, 100000), default=1000, show_default=True,
              help="Events per send_batch call when reading stdin.")
@common_options
@json_option
@pass_app
def send(app: App, queue: str, payload: str | None, type_: str | None, headers: dict[str, str],
         key: str | None, priority: int, delay: timedelta | None, batch_size: int) -> None:
    """Append an event to QUEUE.

    PAYLOAD is a JSON value ('{"id": 42}').  Without PAYLOAD (or with -), JSON lines are read
    from stdin and sent in batches (one send_batch call per --batch-size lines); each batch
    commits on its own.  Examples:

    \b
      pglogq send orders '{"id": 42}' --type order.created
      jq -c '.[]' orders.json | pglogq send orders --type order.created

    JSON: {"queue": str, "count": int, "ids": [int]}
    """
    hdrs = headers or None
    if payload is not None and payload != "-":
        try:
            value = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise CliError(f"PAYLOAD is not valid JSON: {exc.msg} (at character {exc.pos})", Exit.INVALID,
                           hint="quote it for the shell, e.g. '{\"id\": 42}' or '\"text\"'") from exc
        ids = [app.client.send(queue, value, type=type_, headers=hdrs, priority=priority,
                               idempotency_key=key, delay=delay, conn=app.conn)]
    else:
        if sys.stdin.isatty():
            raise click.UsageError("give a PAYLOAD, or pipe JSON lines on stdin")
        if key is not None:
            raise click.UsageError("--key applies to a single PAYLOAD, not to lines from stdin")
        ids = []
        batch: list[Any] = []
        stream = sys.stdin
        try:
            for _, value in _json_lines(stream):
                batch.append(value)
                if len(batch) >= batch_size:
                    ids += app.client.send_batch(queue, batch, type=type_, headers=hdrs, priority=priority,
                                                 delay=delay, conn=app.conn)
                    batch = []
        except _BadLine as exc:
            raise CliError(f"stdin line {exc.line} is not valid JSON: {exc.why}", Exit.INVALID,
                           hint=f"{len(ids)} event(s) before it were sent" if ids else "nothing was sent") from exc
        if batch:
            ids += app.client.send_batch(queue, batch, type=type_, headers=hdrs, priority=priority,
                                         delay=delay, conn=app.conn)
    if app.json:
        emit_json({"queue": queue, "count": len(ids), "ids": ids})
    elif len(ids) == 1:
        click.echo(f"sent to {queue!r}: id {ids[0]}")
    elif ids:
        click.echo(f"sent {len(ids)} events to {queue!r}: ids {ids[0]}..{ids[-1]}")
    else:
        click.echo("nothing to send (no lines on stdin)")
