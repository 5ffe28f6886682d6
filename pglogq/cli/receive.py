"""``pglogq receive`` (consume as a consumer) and ``pglogq tail`` (follow a queue)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import click
import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

import pglogq
from pglogq.cli import jsontext
from pglogq.cli.app import App, common_options, json_option, listen_dsn_option, pass_app
from pglogq.cli.errors import CliError, Exit, to_cli_error
from pglogq.cli.lines import LineWriter, interrupts
from pglogq.cli.output import (
    flush_stdout,
    fmt,
    info,
    json_line,
    jsonable,
    print_table,
    quiet_stdout,
    short,
    stdout_closed,
)
from pglogq.cli.params import duration_callback
from pglogq.cli.queries import RECEIVE_RAW
from pglogq.errors import PglogqError, translate
from pglogq.models import Message

PAGE = 1000


def receive_raw(
    client: pglogq.Client, conn: psycopg.Connection[Any], queue: str, consumer: str, max_messages: int,
    worker: str | None = None,
) -> pglogq.Batch:
    """``client.receive`` with payloads and headers kept as the server's JSON text (``conn`` has
    the raw loaders of :mod:`jsontext`): printed exactly, never decoded, whatever they hold."""
    try:
        with conn.cursor(row_factory=tuple_row) as cur:
            rows = cur.execute(RECEIVE_RAW, (queue, consumer, max_messages, worker)).fetchall()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    msgs = [Message(*row) for row in rows]
    return pglogq.Batch(msgs[0].batch_id if msgs else None, queue, consumer, msgs, client)


def _message_json(m: Message, peek: bool = False) -> dict[str, Any]:
    return {
        "batch_id": None if peek else m.batch_id, "msg_id": m.msg_id, "type": m.type, "payload": m.payload,
        "headers": m.headers, "retry_count": m.retry_count, "created_at": m.created_at,
        "priority": m.priority,
    }


def _print_messages(msgs: list[Message]) -> None:
    print_table(
        ["id", "type", "created", "retry", "payload"],
        [[m.msg_id, m.type, fmt(m.created_at), m.retry_count, short(m.payload, 40)] for m in msgs],
        right=["id", "retry"],
    )


def _show_page(app: App, msgs: list[Message], first: bool, peek: bool = False) -> None:
    """Print one page: rows of a table, or elements of the JSON array (opened by the first)."""
    if app.json:
        inner = jsontext.dumps(jsonable([_message_json(m, peek) for m in msgs]), indent=2)[2:-2]  # without "[\n", "\n]"
        click.echo(("[\n" if first else ",\n") + inner, nl=False)
    else:
        _print_messages(msgs)


class _Step:
    """Where a receive run is: what an error or Ctrl-C leaves behind depends on it."""

    RECEIVING = "receiving"
    PRINTING = "printing"
    ACKING = "acknowledging"


def _left(step: str, done: int, page: int, *, refused: bool = False) -> str:
    """What an interrupted or failed run has consumed, in one sentence."""
    before = f"{done} event(s) shown and acknowledged"
    if step == _Step.PRINTING:
        return f"{before}; the page being printed ({page} event(s)) was not acknowledged (the consumer gets it again)"
    if step == _Step.ACKING and refused:
        return f"{before}; the last page ({page} event(s)) was shown but its acknowledgement was refused"
    if step == _Step.ACKING:
        return (f"{before}; the last page ({page} event(s)) was shown but may not be acknowledged"
                " (if not, the consumer gets it again)")
    return f"{before}; nothing after them was acknowledged"


@click.command()
@click.argument("queue")
@click.argument("consumer")
@click.option("--max", "max_", type=click.IntRange(1, 100000), default=100, show_default=True,
              help="Receive at most this many events.")
@click.option("--peek", is_flag=True,
              help="Show the next page without opening a batch or acknowledging (nothing changes).")
@click.option("--worker", metavar="NAME", help="Receive as cooperating worker NAME of the consumer.")
@common_options
@json_option
@pass_app
def receive(app: App, queue: str, consumer: str, max_: int, peek: bool, worker: str | None) -> None:
    """Receive and acknowledge up to --max events of CONSUMER on QUEUE.

    Page by page, each page is printed (and flushed) first and acknowledged after: what is
    shown is consumed, and only that.  After an error, a closed stdout or Ctrl-C nothing more
    is acknowledged, and the message says how many events were shown and acknowledged.  With
    --peek the next page is shown and nothing changes: no batch is opened (a worker's open
    batch is shown as it is), nothing is acknowledged.  Only ticked events are
    delivered (a ticker must run: `pglogq ticker run`).  Payloads are printed exactly as
    PostgreSQL stores them.

    JSON: [{"batch_id" (null with --peek), "msg_id", "type", "payload", "headers", "retry_count", "created_at",
    "priority"}]
    """
    done = 0  # events printed and acknowledged
    page = 0
    step = _Step.RECEIVING
    opened = False  # the JSON array has been opened on stdout
    try:
        while done < max_:
            step = _Step.RECEIVING
            if peek:
                # receive in a transaction that is rolled back: the page is shown and no batch
                # stays open (nothing blocks `consumer seek`, nothing counts as seen)
                with app.conn.transaction(force_rollback=True):
                    batch = receive_raw(app.client, app.conn, queue, consumer, min(PAGE, max_ - done), worker)
            else:
                batch = receive_raw(app.client, app.conn, queue, consumer, min(PAGE, max_ - done), worker)
            if not batch:
                break
            page = len(batch)
            step = _Step.PRINTING
            _show_page(app, batch.messages, not opened, peek)
            opened = True
            flush_stdout()
            if peek:
                done = page
                break
            step = _Step.ACKING
            batch.ack(conn=app.conn)
            done += page
            step = _Step.RECEIVING
    except KeyboardInterrupt:
        if step != _Step.PRINTING:  # in the middle of a page the output is broken anyway
            _close_array(app, opened)
        raise CliError(f"interrupted: {_left(step, done, page)}", Exit.INTERRUPTED) from None
    except OSError as exc:
        if stdout_closed(exc) and step == _Step.PRINTING:
            quiet_stdout()
            info(f"pglogq: stdout closed: {_left(step, done, page)}")
            raise click.exceptions.Exit(0) from None
        err = to_cli_error(exc)
        if step == _Step.PRINTING:
            err = CliError(f"cannot print: {exc}", Exit.OTHER)
        else:
            _close_array(app, opened)
        raise CliError(f"{err.format_message()}; {_left(step, done, page)}", err.exit_code) from exc
    except Exception as exc:
        if step == _Step.RECEIVING and not opened:
            raise  # nothing was shown nor acknowledged: the error alone says it all
        _close_array(app, opened)
        err = to_cli_error(exc)
        refused = isinstance(exc, PglogqError)  # the server answered: that ack did not happen
        raise CliError(f"{err.format_message()}; {_left(step, done, page, refused=refused)}",
                       err.exit_code) from exc
    if app.json:
        click.echo("\n]" if opened else "[]")
        return
    if not done:
        click.echo("no events (nothing ticked since the last batch)")
        return
    click.echo(f"{done} event(s) " + ("shown (--peek: no batch opened, nothing acknowledged)" if peek
                                      else "received and acknowledged"))


def _close_array(app: App, opened: bool) -> None:
    """After an error: end the JSON document, so stdout holds exactly the events shown."""
    if app.json:
        with contextlib.suppress(Exception):
            click.echo("\n]" if opened else "[]")


def listener(app: App, queue: str, probe_timeout: float = 2.0) -> psycopg.Connection[Any] | None:
    """A connection LISTENing on the tick channel of ``queue`` (on ``--listen-dsn`` if given), or
    None after saying on stderr why not: a probe NOTIFY sent on the command's own connection must
    come back within ``probe_timeout`` seconds (through PgBouncer in transaction mode it cannot)."""
    conn = app.connect(dsn=app.listen_dsn)
    probe = f"pglogq.probe.{secrets.token_hex(8)}"
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"pglogq.{queue}")))
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(probe)))
    app.conn.execute("SELECT pg_catalog.pg_notify(%s, '')", (probe,))
    if any(n.channel == probe for n in conn.notifies(timeout=probe_timeout, stop_after=1)):
        conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(probe)))
        return conn
    info("pglogq: warning: tick notifications cannot arrive on this connection (is --dsn a PgBouncer "
         "in transaction mode? give --listen-dsn a direct DSN); polling every --poll instead")
    conn.close()
    return None


@click.command()
@click.argument("queue")
@click.option("--max", "max_", type=click.IntRange(1), help="Stop after this many events.")
@click.option("--for", "for_", callback=duration_callback, metavar="DURATION", help="Stop after this long (e.g. 30s).")
@click.option("--poll", callback=duration_callback, default="1s", show_default=True, metavar="DURATION",
              help="Look for new ticks at least this often when no notification comes.")
@click.option("--tick", "tick", is_flag=True,
              help="Also run the ticker for this queue (when no ticker daemon runs, e.g. in development).")
@listen_dsn_option
@common_options
@json_option
@pass_app
def tail(app: App, queue: str, max_: int | None, for_: timedelta | None, poll: timedelta, tick: bool) -> None:
    """Follow QUEUE: print new events as they are ticked, until Ctrl-C.

    Uses a throw-away consumer named tail-<pid>-<random>, subscribed at start and removed on
    exit (Ctrl-C, SIGTERM, --max, --for); other consumers are not affected.  Wakes up on the
    tick notification "pglogq.<queue>" and polls as a fallback.  Through PgBouncer in
    transaction mode give --listen-dsn a direct DSN for the LISTEN (it warns, then polls, when
    notifications cannot arrive).

    Ctrl-C or SIGTERM stops it where a line ends (a line partly written is finished first; a
    second signal leaves it cut), and the last line on stderr says how many events were
    printed: exactly the whole lines stdout got.

    JSON: one object per line: {"msg_id", "type", "payload", "headers", "retry_count",
    "created_at", "priority", "batch_id"}
    """
    name = f"tail-{os.getpid()}-{secrets.token_hex(3)}"
    client = app.client
    conn = app.conn
    listen = listener(app, queue)
    out = LineWriter()  # out.lines: events printed (a page is acknowledged once all of it is out)
    closed = False
    deadline = time.monotonic() + for_.total_seconds() if for_ is not None else None
    with interrupts(out):
        try:
            client.subscribe(queue, name, conn=conn)
            if not app.json:
                info(f"following {queue!r} as throw-away consumer {name!r} (Ctrl-C to stop)")
            while max_ is None or out.lines < max_:
                if tick:
                    client.tick(queue, conn=conn)
                page_size = PAGE if max_ is None else min(PAGE, max_ - out.lines)
                batch = receive_raw(client, conn, queue, name, page_size)
                if batch:
                    if app.json:
                        out.write([json_line(_message_json(m)) for m in batch])
                    else:
                        out.write([f"{m.msg_id}\t{m.type or '-'}\t{fmt(m.created_at)}\t{short(m.payload, 200)}\n"
                                   for m in batch])
                    batch.ack(conn=conn)
                    continue
                wait = poll.total_seconds()
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                if listen is None:
                    time.sleep(max(wait, 0.01))
                    continue
                for _ in listen.notifies(timeout=max(wait, 0.01), stop_after=1):
                    pass
        except KeyboardInterrupt:
            pass  # Ctrl-C (or SIGTERM) is how tail ends
        except OSError as exc:
            if not stdout_closed(exc):
                raise
            closed = True  # the reader went away (`| head`): a normal end
            quiet_stdout()
        finally:
            out.finish()  # a signal from here on changes nothing: the consumer is removed
            out.close()
            with _signals_held():
                client.unsubscribe(queue, name, conn=conn)
        info(f"{out.lines} event(s) printed" + (" (stdout closed)" if closed else "") + f"; consumer {name!r} removed")


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while cleaning up, so a second one cannot leave the consumer behind."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
