"""``pglogq capture``: capture a table's row changes into a queue (add, list, remove)."""

from __future__ import annotations

import json
from typing import Any

import click
import psycopg

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.errors import CliError, Exit, to_cli_error
from pglogq.cli.output import emit_json, print_table


def _unknown_table(exc: psycopg.Error, table: str) -> CliError:
    why = exc.diag.message_primary or f"no table {table!r}"
    return CliError(why, Exit.NOT_FOUND, hint="name it as in SQL: schema.table, quoted where needed")


def _unknown_schema(exc: psycopg.errors.InvalidSchemaName, table: str) -> CliError:
    """A table named in a schema that does not exist is not found, like an unknown table; only
    pglogq's own schema missing means pglogq is not installed."""
    if '"pglogq"' in (exc.diag.message_primary or ""):
        return to_cli_error(exc)
    return _unknown_table(exc, table)


@click.group()
@common_options
def capture() -> None:
    """Capture a table's row changes as events (one per inserted, updated or deleted row)."""


@capture.command()
@click.argument("table")
@click.argument("queue")
@click.option("--include", "include", multiple=True, metavar="COLUMN",
              help="Capture only this column (repeatable); columns added later are left out.")
@click.option("--exclude", "exclude", multiple=True, metavar="COLUMN",
              help="Leave this column out (repeatable); columns added later are captured.")
@click.option("--key-column", "keys", multiple=True, metavar="COLUMN",
              help="A column of the key (repeatable; default: the primary key; needed without one).")
@click.option("--old-values", type=click.Choice(["changed", "full", "none"]), default="changed", show_default=True,
              help="What an UPDATE carries of the old row.")
@click.option("--only-if", metavar="JSON",
              help='Capture only rows that contain this JSON object, e.g. \'{"status": "paid"}\'.')
@common_options
@json_option
@pass_app
def add(app: App, table: str, queue: str, include: tuple[str, ...], exclude: tuple[str, ...],
        keys: tuple[str, ...], old_values: str, only_if: str | None) -> None:
    """Capture TABLE's changes into QUEUE (replaces the options of an existing capture).

    Needs pglogq_writer and the TRIGGER privilege on the table.

    JSON: {"table": str, "queue": str, "created": bool}
    """
    cond: Any = None
    if only_if is not None:
        try:
            cond = json.loads(only_if)
        except ValueError as exc:
            raise CliError(f"--only-if is not JSON: {exc}", Exit.INVALID) from exc
    try:
        created = app.client.capture_table(
            table, queue, include_columns=list(include) or None, exclude_columns=list(exclude) or None,
            key_columns=list(keys) or None, old_values=old_values, only_if=cond, conn=app.conn,
        )
    except psycopg.errors.UndefinedTable as exc:
        raise _unknown_table(exc, table) from exc
    except psycopg.errors.InvalidSchemaName as exc:
        raise _unknown_schema(exc, table) from exc
    if app.json:
        emit_json({"table": table, "queue": queue, "created": created})
    else:
        click.echo(f"capturing {table} into {queue!r}" + ("" if created else " (options replaced)"))


@capture.command("list")
@click.option("--queue", metavar="QUEUE", help="Only the tables captured into this queue.")
@common_options
@json_option
@pass_app
def list_(app: App, queue: str | None) -> None:
    """List the captured tables.

    JSON: [{"table_name", "queue_name", "key_columns", "include_columns", "exclude_columns",
    "old_values", "only_if"}]
    """
    rows = app.client.captured_tables(queue, conn=app.conn)
    if app.json:
        emit_json(rows)
        return
    print_table(
        ["table", "queue", "key", "columns", "old values", "only if"],
        [[r.table_name, r.queue_name, ", ".join(r.key_columns),
          ("only " + ", ".join(r.include_columns)) if r.include_columns
          else ("all but " + ", ".join(r.exclude_columns)) if r.exclude_columns else "all",
          r.old_values, json.dumps(r.only_if) if r.only_if else "-"] for r in rows],
        empty="no captured tables (capture one with `pglogq capture add TABLE QUEUE`)",
    )


@capture.command()
@click.argument("table")
@click.option("--queue", metavar="QUEUE", help="Stop capturing into this queue only (default: every queue).")
@common_options
@json_option
@pass_app
def remove(app: App, table: str, queue: str | None) -> None:
    """Stop capturing TABLE (events already captured stay in their queue).

    Needs ownership of the table.

    JSON: {"table": str, "removed": int}
    """
    try:
        removed = app.client.uncapture_table(table, queue, conn=app.conn)
    except psycopg.errors.UndefinedTable as exc:
        raise _unknown_table(exc, table) from exc
    except psycopg.errors.InvalidSchemaName as exc:
        raise _unknown_schema(exc, table) from exc
    if app.json:
        emit_json({"table": table, "removed": removed})
    elif removed:
        click.echo(f"{table}: {removed} capture(s) removed")
    else:
        click.echo(f"{table} was not captured" + (f" into {queue!r}" if queue else "") + " (nothing changed)")
