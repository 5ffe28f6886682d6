"""``pglogq schema``: install, upgrade, inspect or print the SQL schema."""

from __future__ import annotations

import click

from pglogq import errors as pe
from pglogq import schema as sch
from pglogq.cli import queries as cq
from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import emit_json, info, print_table


@click.group()
@common_options
def schema() -> None:
    """Install, upgrade and inspect the pglogq schema in a database."""


def _install(app: App, *, upgrade: bool) -> None:
    client = app.client
    before = client.schema_versions(conn=app.conn)
    if upgrade and not before:
        raise CliError(
            "pglogq is not installed in this database", Exit.SCHEMA, hint="run `pglogq schema install`"
        )
    try:
        applied = client.install_schema(conn=app.conn)
    except pe.InstallNotPermitted as exc:
        raise CliError(exc.message, Exit.PERMISSION, hint=exc.hint) from exc
    after = client.schema_versions(conn=app.conn)
    db = app.conn.execute(cq.SERVER_INFO).fetchone()
    dbname = db[0] if db else "?"
    if app.json:
        emit_json({"database": dbname, "applied": applied, "version": max(after) if after else None})
        return
    if applied:
        for label in applied:
            info(f"applied {label}")
        click.echo(f"pglogq schema version {max(after)} installed in database {dbname!r}")
    else:
        click.echo(
            f"pglogq schema version {max(after)} in database {dbname!r} is up to date "
            "(functions, views and grants re-applied)"
        )


@schema.command()
@common_options
@json_option
@pass_app
def install(app: App) -> None:
    """Install the schema (idempotent: re-applies functions and grants when present).

    JSON: {"database": str, "applied": [str], "version": int}
    """
    _install(app, upgrade=False)


@schema.command()
@common_options
@json_option
@pass_app
def upgrade(app: App) -> None:
    """Apply pending migrations and re-apply every function (needs an installed schema).

    JSON: {"database": str, "applied": [str], "version": int}
    """
    _install(app, upgrade=True)


@schema.command()
@common_options
@json_option
@click.option("--check", is_flag=True, help="Exit 7 unless the schema is installed and up to date.")
@pass_app
def status(app: App, check: bool) -> None:
    """Show the installed schema version and pending migrations.

    JSON: {"database": str, "server_version": str, "user": str, "installed": bool,
    "version": int|null, "latest": int, "applied": [int], "pending": [str]}
    """
    versions = app.client.schema_versions(conn=app.conn)
    row = app.conn.execute(cq.SERVER_INFO).fetchone()
    assert row is not None
    pending = [f"{m.version:04d}_{m.name}" for m in sch.migrations() if m.version not in versions]
    out = {
        "database": row[0],
        "server_version": row[1],
        "user": row[2],
        "installed": bool(versions),
        "version": max(versions) if versions else None,
        "latest": sch.latest_version(),
        "applied": versions,
        "pending": pending,
    }
    if app.json:
        emit_json(out)
    else:
        state = (
            "not installed" if not versions else "up to date" if not pending else f"{len(pending)} pending"
        )
        print_table(
            ["database", "server", "user", "version", "latest", "state"],
            [[row[0], row[1], row[2], out["version"], out["latest"], state]],
        )
        for p in pending:
            click.echo(f"pending migration {p} (run `pglogq schema upgrade`)")
    if check and (not versions or pending):
        raise CliError(
            "pglogq schema is " + ("not installed" if not versions else "not up to date"),
            Exit.SCHEMA,
            hint="run `pglogq schema install`" if not versions else "run `pglogq schema upgrade`",
        )


@schema.command("sql")
@common_options
def sql_() -> None:
    """Print the whole schema as one SQL script for psql (needs no database).

    Apply it with: pglogq schema sql | psql -v ON_ERROR_STOP=1 -d mydb
    """
    click.echo(sch.one_file_sql(), nl=False)
