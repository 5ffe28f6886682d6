"""``pglogq send``: append one event, or many from JSON lines on stdin (all or nothing).

Payloads are sent as JSON text and cast by the server, never decoded into Python values and
encoded again: what the user typed is what is stored (big integers, ``1.10``, ``1e400``).  Each
one is checked first the way PostgreSQL will check it (``NaN`` and ``Infinity`` are refused).
Lines from stdin are sent in one transaction: either every line is sent, or (a bad line, a line
the server refuses, Ctrl-C, a lost connection) nothing is, and the message names the line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import click
import psycopg

from pglogq.cli import queries as cq
from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.errors import CliError, Exit, to_cli_error
from pglogq.cli.jsontext import check
from pglogq.cli.output import emit_json
from pglogq.cli.params import duration_callback, key_values_callback
from pglogq.errors import PglogqError, translate
from pglogq.keys import check_key

NOTHING_SENT = "nothing was sent (the lines go in one transaction: all or nothing)"


class _BadLine(Exception):
    """Line ``line`` of stdin cannot be sent; ``error`` says why (a CliError)."""

    def __init__(self, line: str, error: CliError) -> None:
        super().__init__(f"line {line}: {error.format_message()}")
        self.line = line
        self.error = error


def _lines() -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-blank lines of stdin; a line that is not UTF-8 is refused."""
    raw = getattr(sys.stdin, "buffer", None)
    if raw is None:  # pragma: no cover - a text-only stdin
        for n, line in enumerate(sys.stdin, 1):
            if line.strip():
                yield n, line
        return
    for n, data in enumerate(raw, 1):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _BadLine(str(n), CliError(f"not UTF-8 ({exc.reason} at byte {exc.start})", Exit.INVALID)) from exc
        if line.strip():
            yield n, line


def _send_one(app: App, params: dict[str, Any], count: int = 1) -> list[int]:
    """Send one payload, or (``params["batch"]``) a JSON array of ``count`` payloads."""
    event_key = params["event_key"]
    params = {**params, "event_keys": None if event_key is None else [event_key] * count}
    try:
        sql = (cq.SEND_BATCH_TEXT if params["batch"] else cq.SEND_TEXT if event_key is None
               else cq.SEND_KEYED_TEXT)
        row = app.conn.execute(sql, params).fetchone()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    value = row[0] if row else None
    if params["batch"]:
        return [int(i) for i in value or []]
    if value is None:  # pragma: no cover - send always returns an id
        raise CliError("the server returned no message id", Exit.OTHER)
    return [int(value)]


def _send_lines(app: App, lines: list[tuple[int, str]], params: dict[str, Any]) -> list[int]:
    """Send ``lines`` in one statement (inside the open transaction); name the line refused."""
    try:
        with app.conn.transaction():  # a savepoint: the lines can be tried one by one after it
            return _send_one(app, {**params, "batch": True, "payload": "[" + ",".join(t for _, t in lines) + "]"},
                             len(lines))
    except (psycopg.Error, PglogqError) as exc:
        whole = exc
    for n, text in lines:  # which line? each alone, in its own savepoint
        try:
            with app.conn.transaction():
                _send_one(app, {**params, "batch": True, "payload": f"[{text}]"})
        except (psycopg.Error, PglogqError) as exc:
            raise _BadLine(str(n), to_cli_error(exc)) from exc
    first, last = lines[0][0], lines[-1][0]
    raise _BadLine(f"{first}-{last}", to_cli_error(whole)) from whole


@click.command()
@click.argument("queue")
@click.argument("payload", required=False)
@click.option("--type", "type_", metavar="TYPE", help="Event type, e.g. order.created.")
@click.option("--header", "headers", multiple=True, callback=key_values_callback, metavar="KEY=VALUE",
              help="A header (repeatable); the value is a string.")
@click.option("--key", metavar="KEY", help="Idempotency key: the same key within the queue's window sends once.")
@click.option("--event-key", metavar="KEY",
              help="Event key (1 to 255 bytes; also for every line of stdin): on a partitioned queue the "
                   "events of one key go to one partition and are handled in send order, one at a time.")
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
         key: str | None, event_key: str | None, priority: int, delay: timedelta | None,
         batch_size: int) -> None:
    """Append an event to QUEUE.

    PAYLOAD is a JSON value ('{"id": 42}'), stored exactly as written (NaN and Infinity are
    not JSON and are refused).  Without PAYLOAD (or with -), JSON lines are read from stdin and
    sent in batches (one send_batch call per --batch-size lines), all in one transaction: every
    line is sent, or none is (a bad line, a line the server refuses, Ctrl-C), and the error
    names the line.  Examples:

    \b
      pglogq send orders '{"id": 42}' --type order.created
      jq -c '.[]' orders.json | pglogq send orders --type order.created
      pglogq send orders '{"id": 42}' --event-key customer-7

    JSON: {"queue": str, "count": int, "ids": [int]}
    """
    params: dict[str, Any] = {"queue": queue, "type": type_, "headers": json.dumps(headers) if headers else None,
                              "priority": priority, "key": key, "delay": delay,
                              "event_key": None if event_key is None else check_key(event_key)}
    if payload is not None and payload != "-":
        try:
            text = check(payload)
        except ValueError as exc:
            raise CliError(f"PAYLOAD is not valid JSON: {exc}", Exit.INVALID,
                           hint="quote it for the shell, e.g. '{\"id\": 42}' or '\"text\"'") from exc
        ids = _send_one(app, {**params, "batch": False, "payload": text})
    else:
        if sys.stdin.isatty():
            raise click.UsageError("give a PAYLOAD, or pipe JSON lines on stdin")
        if key is not None:
            raise click.UsageError("--key applies to a single PAYLOAD, not to lines from stdin")
        ids = _send_stdin(app, params, batch_size)
    if app.json:
        emit_json({"queue": queue, "count": len(ids), "ids": ids})
    elif len(ids) == 1:
        click.echo(f"sent to {queue!r}: id {ids[0]}")
    elif ids:
        click.echo(f"sent {len(ids)} events to {queue!r}: ids {ids[0]}..{ids[-1]}")
    else:
        click.echo("nothing to send (no lines on stdin)")


def _send_stdin(app: App, params: dict[str, Any], batch_size: int) -> list[int]:
    ids: list[int] = []
    batch: list[tuple[int, str]] = []
    committing = False
    try:
        with app.conn.transaction():
            for n, line in _lines():
                try:
                    batch.append((n, check(line)))
                except ValueError as exc:
                    raise _BadLine(str(n), CliError(f"not valid JSON: {exc}", Exit.INVALID)) from exc
                if len(batch) >= batch_size:
                    ids += _send_lines(app, batch, params)
                    batch = []
            if batch:
                ids += _send_lines(app, batch, params)
            committing = True
    except _BadLine as exc:
        raise CliError(f"stdin line {exc.line}: {exc.error.message}", exc.error.exit_code,
                       hint=NOTHING_SENT) from exc
    except KeyboardInterrupt:
        if committing:
            raise CliError("interrupted while committing: the lines may or may not be sent",
                           Exit.INTERRUPTED) from None
        raise CliError(f"interrupted: {NOTHING_SENT}", Exit.INTERRUPTED) from None
    except Exception as exc:
        err = to_cli_error(exc)
        if committing:
            raise CliError(f"{err.message}: the commit failed, the lines may or may not be sent",
                           err.exit_code) from exc
        raise CliError(err.message, err.exit_code, hint=NOTHING_SENT) from exc
    return ids
