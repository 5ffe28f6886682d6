"""``pglogq worker MODULE:ATTR`` — run a consumer defined in your code as a worker process.

``ATTR`` (default ``consumer``) is a :class:`pglogq.Consumer` or :class:`pglogq.AsyncConsumer`,
or a function without arguments that returns one.  Also runnable as
``python -m pglogq.worker MODULE:ATTR``.

SIGTERM or SIGINT finishes the page being handled (its handlers complete, then it is
acknowledged) and exits; a second signal abandons the page unacknowledged (all of it comes back
to the subscription) and the process exits at once, without waiting for handler threads it left
behind (nor for threads those started, e.g. a ThreadPoolExecutor's).  Either way no page is ever
half-acknowledged.

The worker connects once before it starts: a database it cannot reach (refused, unknown host, no
such database, bad password) ends it at once with the reason and exit code 6, where the consumer
would retry forever.  Once started, a worker that loses its database keeps trying and logs each
failure with its reason.

A share consumer (``pglogq consumer subscribe QUEUE NAME --share``) runs as ``--concurrency``
handler slots (times the consumer's ``workers``), each taking its own lease of the next events
no other worker holds, named ``f"{base}-{i}"`` (``base``: ``--worker``, else ``host:pid``); the
mode is learnt from the subscription, and ``--share`` insists on it (``pglogq worker`` exits
with code 4 and the reason for an ordinary consumer: ShareModeMismatch).  SIGTERM lets each
slot finish the event it runs and gives the rest of its lease back at once for other workers
(``cede``).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

import click
import psycopg

from pglogq._runtime import WORKER_NAME_RE, RunStats, auto_worker_name
from pglogq.consumer import Consumer
from pglogq.consumer_async import AsyncConsumer
from pglogq.errors import CannotConnect

log = logging.getLogger("pglogq.worker")

AnyConsumer = Consumer | AsyncConsumer


def load_consumer(target: str) -> AnyConsumer:
    """Import ``module:attr`` (attr defaults to ``consumer``) and return the consumer it names."""
    module_name, _, attr = target.partition(":")
    if not module_name:
        raise click.BadParameter(f"{target!r}: expected MODULE:ATTR, e.g. myapp.handlers:consumer")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    obj: Any = module
    for part in (attr or "consumer").split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise click.BadParameter(f"{module_name!r} has no attribute {attr or 'consumer'!r}") from exc
    if not isinstance(obj, (Consumer, AsyncConsumer)) and callable(obj):
        obj = obj()
    if not isinstance(obj, (Consumer, AsyncConsumer)):
        raise click.BadParameter(f"{target!r} is {type(obj).__name__}, not a pglogq Consumer or AsyncConsumer")
    return obj


def _configure(consumer: AnyConsumer, worker: str | None, concurrency: int | None, share: bool = False,
               cede_after: float | None = None) -> None:
    if worker is not None:
        name = auto_worker_name() if worker == "auto" else worker
        if not WORKER_NAME_RE.match(name):
            raise click.BadParameter(f"invalid worker name {name!r}: 1 to 63 letters, digits or _.:@-")
        consumer.worker_name = name
        consumer.label = name
    if concurrency is not None:
        # a transactional consumer runs one handler at a time, unless it is a share consumer (a
        # transaction per handler slot)
        if concurrency < 1 or (consumer.transactional and concurrency != 1 and not (share or consumer.share)):
            raise click.BadParameter(f"invalid concurrency {concurrency}")
        consumer.concurrency = concurrency
    if share:
        if consumer.share is False:
            raise click.BadParameter("--share: the consumer was made with share=False")
        consumer.share = True
    if cede_after is not None:
        if not 0 < cede_after <= 3600:
            raise click.BadParameter(f"invalid --cede-after {cede_after:g}: use a number of seconds within 0..3600 "
                                     "(above 0)")
        consumer.cede_after = cede_after


def _connections(consumer: AnyConsumer, pooled: bool, listen_dsn: str | None) -> None:
    if listen_dsn is not None:
        if not listen_dsn.strip():
            raise click.BadParameter("empty --listen-dsn: give a DSN or leave it out")
        consumer.listen_dsn = listen_dsn
    if pooled and not consumer.pooled:
        if not consumer.accepts_dsn:
            raise click.BadParameter(
                "--pooled: the consumer was given a client made without pooled=True; make that client "
                "with pooled=True (or give the consumer a DSN)"
            )
        consumer.pooled = True


def _first_connection(consumer: AnyConsumer) -> None:
    """Connect once to the consumer's database, or raise :class:`CannotConnect` with the reason.

    A worker started against a database it cannot reach (a typo in the DSN, a server that is
    not there) must say so and exit: the consumer's loop treats a connection error as passing
    (a database that restarts) and retries without end.  A sharded consumer is left alone: it
    serves the shards it reaches and retries the others."""
    if consumer.sharded_client is not None:
        return
    dsn = consumer.client.dsn
    if not dsn:
        return  # a pool given by the caller: its connections are the caller's business
    try:
        psycopg.connect(dsn, connect_timeout=10, application_name="pglogq-worker").close()
    except psycopg.OperationalError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise CannotConnect(f"cannot connect to the database: {reason}") from exc


def _summary(consumer: AnyConsumer, stats: RunStats) -> str:
    return (
        f"{consumer!r} stopped: {stats.pages} pages, {stats.handled} handled, {stats.failed} failed "
        f"({stats.retried} to retry, {stats.dead} dead-lettered, {stats.timed_out} timed out), "
        f"{stats.lost_pages} lost to takeover, {stats.abandoned_pages} abandoned"
        + (f", {stats.ceded} ceded to other workers" if consumer.shared else "")
    )


class _Signals:
    """First signal: finish the page and stop; second: abandon it."""

    def __init__(self, consumer: AnyConsumer) -> None:
        self.consumer = consumer
        self.hits = 0

    def __call__(self, signum: int, frame: FrameType | None = None) -> None:
        self.hits += 1
        name = signal.Signals(signum).name
        if self.hits == 1:
            log.info("%s: finishing the current page, then stopping (again to abandon it)", name)
            self.consumer.stop()
        else:
            log.warning("%s again: abandoning the current page unacknowledged (it comes back)", name)
            self.consumer.stop(abandon=True)


def run_consumer(consumer: AnyConsumer, *, stop_when_idle: bool = False, max_batches: int | None = None) -> RunStats:
    """Run a consumer in this process with the worker's signal handling; returns its stats."""
    handler = _Signals(consumer)
    if isinstance(consumer, AsyncConsumer):
        aconsumer = consumer

        async def main() -> RunStats:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, handler, sig, None)
            try:
                return await aconsumer.run(stop_when_idle=stop_when_idle, max_batches=max_batches)
            finally:
                await aconsumer.aclose()

        return asyncio.run(main())
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return consumer.run(stop_when_idle=stop_when_idle, max_batches=max_batches)
    finally:
        consumer.close()
        for sig, old in previous.items():
            signal.signal(sig, old)


@click.command("worker")
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--dsn", help="database to connect to (default: PGLOGQ_DSN, else the embedded server)")
@click.option("--worker", "worker_name", metavar="NAME|auto",
              help="run as a cooperating worker of the subscription ('auto': host-pid-xxxx)")
@click.option("--concurrency", type=int,
              help="handler calls at once (overrides the consumer's); a share consumer's handler slots")
@click.option("--share", is_flag=True,
              help="run as a share consumer, and refuse to start when the subscription is an ordinary one "
              "(without it the mode is learnt from the subscription)")
@click.option("--cede-after", type=float, metavar="SECONDS",
              help="share consumer: give back a lease's unstarted events when one has run this long "
              "(default: the consumer's, 0.2)")
@click.option("--stop-when-idle", is_flag=True, help="exit as soon as there is nothing to receive")
@click.option("--max-batches", type=int, help="exit after handling this many pages")
@click.option("--pooled", is_flag=True, envvar="PGLOGQ_POOLED",
              help="the DSN leads through PgBouncer in transaction mode: prepare no statements, and "
              "LISTEN only on --listen-dsn (else poll)")
@click.option("--listen-dsn", metavar="DSN", envvar="PGLOGQ_LISTEN_DSN",
              help="a direct DSN for the connection that LISTENs for ticks (default: $PGLOGQ_LISTEN_DSN)")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def command(
    target: str,
    dsn: str | None,
    worker_name: str | None,
    concurrency: int | None,
    share: bool,
    cede_after: float | None,
    stop_when_idle: bool,
    max_batches: int | None,
    pooled: bool,
    listen_dsn: str | None,
    log_level: str,
) -> None:
    """Run the consumer MODULE:ATTR (e.g. myapp.handlers:consumer) until SIGTERM/SIGINT."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pglogq.dsn import check_dsn

    for given, where in ((dsn, "--dsn"), (None if dsn else os.environ.get("PGLOGQ_DSN"), "PGLOGQ_DSN")):
        if given:
            try:
                check_dsn(given, where)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
    if dsn:
        os.environ["PGLOGQ_DSN"] = dsn  # for consumers built at import with the DSN rule
    consumer = load_consumer(target)
    if dsn and consumer.accepts_dsn:
        consumer.use_dsn(dsn)
    _configure(consumer, worker_name, concurrency, share, cede_after)
    _connections(consumer, pooled, listen_dsn)
    _first_connection(consumer)
    log.info("starting %r", consumer)
    stats = run_consumer(consumer, stop_when_idle=stop_when_idle, max_batches=max_batches)
    log.info("%s", _summary(consumer, stats))
    if stats.abandoned_pages:
        # asked twice: the page is abandoned and comes back anyway; handler threads left behind
        # (and any non-daemon thread they started, which Python would join at exit) must not
        # keep the process up until they return
        log.warning("exiting now; %d abandoned page(s) come back to the subscription", stats.abandoned_pages)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    command()
