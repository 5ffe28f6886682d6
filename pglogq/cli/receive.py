"""``pglogq receive`` (consume as a consumer) and ``pglogq tail`` (follow a queue)."""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import FrameType
from typing import Any

import click
from psycopg import sql

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.output import emit_json, emit_json_line, fmt, info, print_table, short
from pglogq.cli.params import duration_callback
from pglogq.models import Message

PAGE = 1000


def _message_json(m: Message) -> dict[str, Any]:
    return {
        "batch_id": m.batch_id, "msg_id": m.msg_id, "type": m.type, "payload": m.payload,
        "headers": m.headers, "retry_count": m.retry_count, "created_at": m.created_at,
        "priority": m.priority,
    }


def _print_messages(msgs: list[Message]) -> None:
    print_table(
        ["id", "type", "created", "retry", "payload"],
        [[m.msg_id, m.type, fmt(m.created_at), m.retry_count, short(m.payload, 40)] for m in msgs],
        right=["id", "retry"],
    )


@click.command()
@click.argument("queue")
@click.argument("consumer")
@click.option("--max", "max_", type=click.IntRange(1, 100000), default=100, show_default=True,
              help="Receive at most this many events.")
@click.option("--peek", is_flag=True,
              help="Show the current page without acknowledging it (the consumer gets it again).")
@click.option("--worker", metavar="NAME", help="Receive as cooperating worker NAME of the consumer.")
@common_options
@json_option
@pass_app
def receive(app: App, queue: str, consumer: str, max_: int, peek: bool, worker: str | None) -> None:
    """Receive and acknowledge up to --max events of CONSUMER on QUEUE.

    Events are acknowledged page by page as they are printed: what is shown is consumed.
    With --peek the current page is shown and left unacknowledged.  Only ticked events are
    delivered (a ticker must run: `pglogq ticker run`).

    JSON: [{"batch_id", "msg_id", "type", "payload", "headers", "retry_count", "created_at",
    "priority"}]
    """
    got: list[Message] = []
    while len(got) < max_:
        batch = app.client.receive(queue, consumer, max_messages=min(PAGE, max_ - len(got)), worker=worker,
                                   conn=app.conn)
        if not batch:
            break
        got.extend(batch.messages)
        if peek:
            break
        batch.ack(conn=app.conn)
    if app.json:
        emit_json([_message_json(m) for m in got])
        return
    if not got:
        click.echo("no events (nothing ticked since the last batch)")
        return
    _print_messages(got)
    click.echo(f"{len(got)} event(s) " + ("shown, not acknowledged (--peek)" if peek else "received and acknowledged"))


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends tail like Ctrl-C does, so its throw-away subscription is removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@click.command()
@click.argument("queue")
@click.option("--max", "max_", type=click.IntRange(1), help="Stop after this many events.")
@click.option("--for", "for_", callback=duration_callback, metavar="DURATION", help="Stop after this long (e.g. 30s).")
@click.option("--poll", callback=duration_callback, default="1s", show_default=True, metavar="DURATION",
              help="Look for new ticks at least this often when no notification comes.")
@click.option("--tick", "tick", is_flag=True,
              help="Also run the ticker for this queue (when no ticker daemon runs, e.g. in development).")
@common_options
@json_option
@pass_app
def tail(app: App, queue: str, max_: int | None, for_: timedelta | None, poll: timedelta, tick: bool) -> None:
    """Follow QUEUE: print new events as they are ticked, until Ctrl-C.

    Uses a throw-away consumer named tail-<pid>-<random>, subscribed at start and removed on
    exit (Ctrl-C, SIGTERM, --max, --for); other consumers are not affected.  Wakes up on the
    tick notification "pglogq.<queue>" and polls as a fallback.

    JSON: one object per line: {"msg_id", "type", "payload", "headers", "retry_count",
    "created_at", "priority", "batch_id"}
    """
    name = f"tail-{os.getpid()}-{secrets.token_hex(3)}"
    client = app.client
    conn = app.conn
    listen = app.connect()
    listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"pglogq.{queue}")))
    client.subscribe(queue, name, conn=conn)
    if not app.json:
        info(f"following {queue!r} as throw-away consumer {name!r} (Ctrl-C to stop)")
    seen = 0
    deadline = time.monotonic() + for_.total_seconds() if for_ is not None else None
    try:
        with _sigterm_as_interrupt():
            while max_ is None or seen < max_:
                if tick:
                    client.tick(queue, conn=conn)
                page_size = PAGE if max_ is None else min(PAGE, max_ - seen)
                batch = client.receive(queue, name, max_messages=page_size, conn=conn)
                if batch:
                    for m in batch:
                        if app.json:
                            emit_json_line(_message_json(m))
                        else:
                            click.echo(f"{m.msg_id}\t{m.type or '-'}\t{fmt(m.created_at)}\t{short(m.payload, 200)}")
                    seen += len(batch)
                    batch.ack(conn=conn)
                    continue
                wait = poll.total_seconds()
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                for _ in listen.notifies(timeout=max(wait, 0.01), stop_after=1):
                    pass
    except KeyboardInterrupt:
        pass
    finally:
        client.unsubscribe(queue, name, conn=conn)
    if not app.json:
        info(f"{seen} event(s); consumer {name!r} removed")
