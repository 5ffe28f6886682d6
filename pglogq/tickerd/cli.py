"""The ``pglogq-ticker`` command (also mounted as ``pglogq ticker run``)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

import click

from pglogq.tickerd import logs
from pglogq.tickerd.daemon import Daemon, run_once
from pglogq.tickerd.logs import emit
from pglogq.tickerd.settings import Settings, describe, load_settings, parse_duration


class _Duration(click.ParamType):  # type: ignore[type-arg]
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = _Duration()


class _DsnOption(click.Option):
    """``--dsn`` (repeatable) that also takes one DSN string as its default (``pglogq --dsn X
    ticker run`` passes the group's DSN down through the context's default map)."""

    def type_cast_value(self, ctx: click.Context, value: Any) -> Any:
        if isinstance(value, str):
            value = (value,)
        return super().type_cast_value(ctx, value)

EPILOG = """\b
Environment: PGLOGQ_DSN, and PGLOGQ_TICKER_<OPTION> for every option, named as the option
(--interval: PGLOGQ_TICKER_INTERVAL=5ms, --max-backoff: PGLOGQ_TICKER_MAX_BACKOFF=1m,
--metrics-port: PGLOGQ_TICKER_METRICS_PORT=9187); an unknown PGLOGQ_TICKER_* is refused.
Precedence: command line, then --env-file (re-read on SIGHUP), then the environment.  The
effective configuration is logged at start (event "config").
\b
Signals: SIGTERM/SIGINT stop cleanly; SIGHUP re-reads the settings and reconnects.
Exit codes: 0 ok; 1 database error (--once); 2 usage; 3 database refused (--once: restored
into a cluster whose transaction ids are behind, or reached through a transaction-mode pooler).
"""


@click.command("run", epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dsn", "dsn", cls=_DsnOption, multiple=True, metavar="DSN",
              help="Database to tick (repeat for several), by a direct connection: a DSN through PgBouncer "
              "in transaction mode is refused. Default: PGLOGQ_DSN, else the embedded server.")
@click.option("--once", is_flag=True, help="One pass (restore check, due maintenance, one tick) and exit.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              default=None, help="Default INFO.")
@click.option("--log-format", type=click.Choice(["kv", "json"]), default=None,
              help="key=value lines (default) or JSON lines.")
@click.option("--metrics-port", type=int, default=None, help="Serve /metrics and /healthz on this port.")
@click.option("--metrics-host", default=None, help="Address for the metrics server (default 127.0.0.1).")
@click.option("--interval", "--busy-interval", "busy_interval", type=DURATION, default=None,
              help="Poll interval while events flow (default 5ms).")
@click.option("--idle-interval", type=DURATION, default=None,
              help="Longest poll interval when idle (default 200ms).")
@click.option("--linger", type=DURATION, default=None,
              help="Keep the busy interval this long after the last tick of events (default 1s).")
@click.option("--sleep-max", type=DURATION, default=None,
              help="Longest sleep when idle: a send's NOTIFY or the next keep-alive wakes the ticker "
                   "sooner; 0: poll every idle interval (default 10s).")
@click.option("--maint-interval", type=DURATION, default=None,
              help="How often to run due maintenance: retry/delayed pump (default 500ms).")
@click.option("--maint-idle-interval", type=DURATION, default=None,
              help="Pause of maintenance while the ticker sleeps and nothing is due (default 5s).")
@click.option("--rotate-interval", type=DURATION, default=None,
              help="How often to try rotation and pruning per queue (default 5s).")
@click.option("--standby-retry", type=DURATION, default=None,
              help="How often a standby tries to become active (default 1s).")
@click.option("--max-backoff", "--backoff-max", "backoff_max", type=DURATION, default=None,
              help="Longest delay between reconnection attempts (default 30s).")
@click.option("--env-file", type=click.Path(dir_okay=False), default=None,
              envvar="PGLOGQ_TICKER_ENV_FILE", help="KEY=VALUE file of settings, re-read on SIGHUP.")
def command(dsn: tuple[str, ...], once: bool, env_file: str | None, **options: Any) -> None:
    """Tick every queue and run maintenance, as the one active ticker of each database.

    Start as many as you like: one per database ticks, the others stand by and take over
    within seconds when it dies.
    """
    cli: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
    if dsn:
        cli["dsns"] = tuple(dsn)

    def load() -> Settings:
        return load_settings(cli, os.environ, env_file=env_file)

    try:
        settings = load()
    except (ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from exc
    logs.configure(settings.log_level, settings.log_format)
    # the daemon's start-up record; one pass (a command a person types, the tutorial's) keeps it
    # for --log-level DEBUG instead of printing a screenful before its one line of result
    emit(logging.DEBUG if once else logging.INFO, "config", "effective configuration", **describe(settings))
    try:
        code = asyncio.run(run_once(settings) if once else Daemon(settings, reload=load).serve())
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console script ``pglogq-ticker``."""
    command.main(args=argv, prog_name="pglogq-ticker")
