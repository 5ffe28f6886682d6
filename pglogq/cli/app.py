"""State shared by the commands of one ``pglogq`` run: the DSN, the connection, the flags.

Every command gets ``--dsn`` and ``--debug`` from :func:`common_options`; they may also be given
before the command name (``pglogq --dsn ... queue list``).  The DSN follows the project's rule:
``--dsn`` → ``PGLOGQ_DSN`` → the embedded PostgreSQL (announced on stderr).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pglogq
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.jsontext import register_raw_loaders
from pglogq.dsn import resolve_dsn
from pglogq.errors import EmbeddedUnavailable

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class App:
    """Per-invocation state (``ctx.obj``)."""

    dsn_option: str | None = None
    listen_dsn: str | None = None
    debug: bool = False
    json: bool = False
    _dsn: str | None = None
    _conn: psycopg.Connection[Any] | None = None
    _client: pglogq.Client | None = None
    _closers: list[Callable[[], None]] = field(default_factory=list)

    @property
    def dsn(self) -> str:
        if self._dsn is None:
            try:
                dsn = resolve_dsn(self.dsn_option)
            except EmbeddedUnavailable as exc:
                raise CliError(exc.message, Exit.CONNECTION, hint=exc.hint) from exc
            check_dsn(dsn, "--dsn" if self.dsn_option else "PGLOGQ_DSN")
            self._dsn = dsn
        return self._dsn

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A new autocommit connection (closed when the command ends).

        It never prepares statements, so the DSN may lead through a pooler in transaction mode
        (PgBouncer): a short command gains nothing from prepared statements, and a pooler may
        run the next execution on a server connection that never saw them."""
        try:
            conn = psycopg.connect(
                kwargs.pop("dsn", None) or self.dsn, autocommit=True, connect_timeout=10,
                application_name="pglogq-cli", prepare_threshold=None, **kwargs
            )
        except psycopg.OperationalError as exc:
            why = " ".join(line.strip() for line in str(exc).strip().splitlines())
            raise CliError(
                f"cannot connect to {describe_dsn(self.dsn)}: {why or type(exc).__name__}",
                Exit.CONNECTION,
            ) from exc
        self._closers.append(conn.close)
        # payloads and headers stay JSON text: printed exactly, never decoded (see jsontext)
        register_raw_loaders(conn)
        return conn

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The command's autocommit connection: each statement is its own transaction."""
        if self._conn is None:
            self._conn = self.connect()
        return self._conn

    @property
    def client(self) -> pglogq.Client:
        """A client bound to this run's DSN; pass ``conn=app.conn`` to use the one connection."""
        if self._client is None:
            client = pglogq.Client(self.dsn, min_size=0, max_size=2, pooled=True)  # prepares nothing
            self._client = client
            self._closers.append(client.close)
        return self._client

    def close(self) -> None:
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer()
        self._closers.clear()


def check_dsn(dsn: str, where: str) -> None:
    """Refuse a DSN that cannot be parsed (usage error: it can never connect)."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if dsn and dsn in why:
            why = why.replace(dsn, "<the DSN>")  # it may hold a password
        raise CliError(f"invalid DSN in {where}: {why}", Exit.USAGE,
                       hint="use a URI (postgresql://user@host/db) or key=value pairs (host=... dbname=...)") from exc


def describe_dsn(dsn: str) -> str:
    """A DSN without its password, for messages."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the database"
    parts.pop("password", None)
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


def get_app(ctx: click.Context | None = None) -> App:
    ctx = ctx or click.get_current_context()
    app = ctx.find_object(App)
    if app is None:
        root = ctx.find_root()
        root.obj = app = App()
        root.call_on_close(app.close)
    return app


def pass_app(f: F) -> F:
    """Pass the run's :class:`App` as the first argument of a command callback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return f(get_app(), *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _set_dsn(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None and not value.strip():
        # `--dsn "$DATABASE_URL"` with the variable unset must not fall back to another database
        raise click.BadParameter("empty DSN: give one, or leave --dsn out to use $PGLOGQ_DSN", param=param)
    if value:
        get_app(ctx).dsn_option = value


def _set_listen_dsn(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None and not value.strip():
        raise click.BadParameter("empty DSN: give one, or leave --listen-dsn out", param=param)
    if value:
        check_dsn(value, "--listen-dsn")
        get_app(ctx).listen_dsn = value


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        get_app(ctx).debug = True


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        get_app(ctx).json = True


dsn_option = click.option(
    "--dsn",
    metavar="DSN",
    expose_value=False,
    is_eager=True,
    callback=_set_dsn,
    help="PostgreSQL DSN (default: $PGLOGQ_DSN, else the embedded server).",
)
listen_dsn_option = click.option(
    "--listen-dsn",
    metavar="DSN",
    envvar="PGLOGQ_LISTEN_DSN",
    expose_value=False,
    is_eager=True,
    callback=_set_listen_dsn,
    help="A direct DSN for LISTEN when --dsn leads through PgBouncer in transaction mode "
    "(default: $PGLOGQ_LISTEN_DSN, else --dsn; without a working LISTEN, commands poll).",
)
debug_option = click.option(
    "--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
    help="Show the traceback of an error.",
)
json_option = click.option(
    "--json", "json_flag", is_flag=True, expose_value=False, callback=_set_json,
    help="Print JSON for scripts (see the reference for its shape).",
)


def common_options(f: F) -> F:
    """``--dsn`` and ``--debug``, accepted by every command."""
    return dsn_option(debug_option(f))
