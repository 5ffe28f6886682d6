"""Entry point of the ``pglogq`` command: the root group and where every command is mounted."""

from __future__ import annotations

import traceback
from typing import Any

import click

from pglogq.cli.app import common_options, get_app
from pglogq.cli.errors import CliError, Exit, to_cli_error
from pglogq.cli.lazy import LazyGroup
from pglogq.cli.output import quiet_stdout, stdout_closed

# Commands that live with the part of pglogq they run; loaded on first use.
HOSTED: dict[str, tuple[str, str]] = {
    "worker": ("pglogq.worker:command", "Run consumer workers from an import path."),
}
TICKER_HOSTED: dict[str, tuple[str, str]] = {
    "run": ("pglogq.tickerd.cli:command", "Run the ticker daemon (ticks and maintenance)."),
}


class PglogqGroup(LazyGroup):
    """The root group: turns every error into one line on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, click.UsageError):
            raise
        except KeyboardInterrupt:
            raise CliError("interrupted", Exit.INTERRUPTED) from None
        except OSError as exc:
            if not stdout_closed(exc):
                raise to_cli_error(exc) from exc
            # the reader went away (`| head`): a normal end; print nothing more
            quiet_stdout()
            raise click.exceptions.Exit(0) from None
        except Exception as exc:
            app = get_app(ctx)
            if app.debug:
                traceback.print_exc()
            if isinstance(exc, CliError):
                raise
            raise to_cli_error(exc) from exc


@click.group(cls=PglogqGroup, lazy=HOSTED, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pglogq")
@common_options
@click.pass_context
def main(ctx: click.Context) -> None:
    """pglogq: an append-only log queue on PostgreSQL.

    Producers append events, a ticker records snapshots, and every consumer reads the batch
    between two ticks with its own cursor.  Every command takes --dsn (else $PGLOGQ_DSN, else
    the embedded PostgreSQL) and prints human tables, or JSON with --json.
    """
    app = get_app(ctx)
    if app.dsn_option:
        # hosted commands (worker, ticker run) take their own --dsn: pass ours on
        defaults: dict[str, Any] = {name: {"dsn": app.dsn_option} for name in HOSTED}
        defaults["ticker"] = {name: {"dsn": app.dsn_option} for name in TICKER_HOSTED}
        ctx.default_map = defaults


@main.group(cls=LazyGroup, lazy=TICKER_HOSTED)
@common_options
def ticker() -> None:
    """The ticker: records snapshots of each queue and runs maintenance."""


def _register() -> None:
    from pglogq.cli import (
        cancel,
        capture,
        cluster,
        consumer,
        dashboard,
        database,
        demo,
        dlq,
        jobs,
        queue,
        receive,
        schema,
        send,
        status,
    )

    main.add_command(schema.schema)
    main.add_command(queue.queue)
    main.add_command(consumer.consumer)
    main.add_command(send.send)
    main.add_command(cancel.cancel)
    main.add_command(receive.receive)
    main.add_command(receive.tail)
    main.add_command(status.status)
    main.add_command(dlq.dlq)
    main.add_command(demo.demo)
    main.add_command(database.dsn)
    main.add_command(database.psql)
    main.add_command(database.embedded)
    main.add_command(capture.capture)
    main.add_command(jobs.job)
    main.add_command(jobs.jobs)
    main.add_command(jobs.schedule)
    main.add_command(dashboard.dashboard)
    main.add_command(cluster.cluster)


_register()
