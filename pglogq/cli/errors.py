"""Exit codes of the ``pglogq`` command and the translation of errors into one line of stderr.

| code | meaning |
| ---- | ------- |
| 0    | success |
| 1    | any other error (an unexpected server error, a bug: rerun with ``--debug``) |
| 2    | usage error: unknown command or option, missing argument, a malformed option value or DSN |
| 3    | not found: unknown queue, consumer, batch or dead letter |
| 4    | invalid input: bad name, config value, payload, seek position out of range |
| 5    | conflict: already exists, queue in use, batch open, batch no longer current, port in use |
| 6    | cannot connect to the database (or no DSN and no embedded PostgreSQL) |
| 7    | pglogq is not installed in that database, or its schema is of another version |
| 8    | permission denied (the role lacks a pglogq grant) |
| 9    | command not available in this installation (a hosted command's module is missing) |
| 10   | not confirmed: a destructive or bulk action declined, or refused without ``--yes`` |
| 11   | ``status --check`` found a problem (ticker stalled, ...); ``cluster status`` a broken shard map |
| 130  | interrupted (Ctrl-C); the message says what was done before |

A value that does not parse as its option's type, or lies outside the range shown in the help
(``--max 0``, ``--delay 99999999999d``, a DSN that cannot be parsed), is a usage error (2); a
well-formed value that pglogq refuses (a bad name or setting, a payload PostgreSQL would refuse, an
integer beyond 64 bits, a seek position out of range) is invalid input (4).  A closed stdout (the
reader went away, e.g. ``| head``) is a normal end: exit 0, nothing more is printed, and a command
that acknowledges events acknowledges only what it wrote.
"""

from __future__ import annotations

from enum import IntEnum
from typing import IO, Any

import click
import psycopg

from pglogq import errors as pe


class Exit(IntEnum):
    OK = 0
    OTHER = 1
    USAGE = 2
    NOT_FOUND = 3
    INVALID = 4
    CONFLICT = 5
    CONNECTION = 6
    SCHEMA = 7
    PERMISSION = 8
    NOT_AVAILABLE = 9
    NOT_CONFIRMED = 10
    CHECK_FAILED = 11
    JOB_FAILED = 12
    TIMED_OUT = 13
    INTERRUPTED = 130


EXIT_TABLE: list[tuple[int, str]] = [
    (Exit.OK, "success"),
    (Exit.OTHER, "any other error (an unexpected server error; rerun with --debug)"),
    (Exit.USAGE, "usage error: unknown command or option, missing argument, a value not of the option's"
                 " type or outside the range its help shows, a DSN that cannot be parsed"),
    (Exit.NOT_FOUND, "not found: unknown queue, consumer, batch or dead letter"),
    (Exit.INVALID, "invalid input: bad name, config value, payload, an integer beyond 64 bits, seek"
                   " position out of range"),
    (Exit.CONFLICT, "conflict: already exists, queue in use, batch open, batch no longer current, the"
                    " dashboard's port in use"),
    (Exit.CONNECTION, "cannot connect to the database (or no DSN and no embedded PostgreSQL)"),
    (Exit.SCHEMA, "pglogq is not installed in that database, or its schema is of another version"),
    (Exit.PERMISSION, "permission denied (the role lacks a pglogq grant)"),
    (Exit.NOT_AVAILABLE, "command not available in this installation"),
    (Exit.NOT_CONFIRMED, "not confirmed: declined, or refused without --yes on a non-terminal"),
    (Exit.CHECK_FAILED, "status --check found a problem; cluster status found a broken shard map"),
    (Exit.JOB_FAILED, "job wait: the job ended dead or cancelled for that consumer"),
    (Exit.TIMED_OUT, "job wait: no final outcome within --timeout"),
    (Exit.INTERRUPTED, "interrupted (Ctrl-C); the message says what was done before"),
]
"""The documented table (rendered into docs/reference/cli.md)."""


class CliError(click.ClickException):
    """An error reported as one line on stderr with its own exit code."""

    def __init__(self, message: str, code: int = Exit.OTHER, *, hint: str | None = None) -> None:
        super().__init__(message)
        object.__setattr__(self, "exit_code", int(code))
        self.hint = hint

    def format_message(self) -> str:
        if self.hint:
            return f"{self.message}; {self.hint}"
        return self.message

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"pglogq: error: {self.format_message()}", file=file, err=True)


_CLASS_CODES: list[tuple[type[BaseException], Exit]] = [
    (pe.NotFound, Exit.NOT_FOUND),
    (pe.InvalidInput, Exit.INVALID),
    (pe.SeekOutOfRange, Exit.INVALID),
    (pe.AlreadyExists, Exit.CONFLICT),
    (pe.QueueInUse, Exit.CONFLICT),
    (pe.QueueCaptured, Exit.CONFLICT),
    (pe.BatchOpen, Exit.CONFLICT),
    (pe.StaleBatch, Exit.CONFLICT),
    (pe.SchemaMismatch, Exit.SCHEMA),
    (pe.EmbeddedUnavailable, Exit.CONNECTION),
    (pe.CannotConnect, Exit.CONNECTION),
    (pe.ShardUnavailable, Exit.CONNECTION),
    (pe.GatesPending, Exit.CONFLICT),
    (pe.NotAClusterMember, Exit.NOT_FOUND),
    (pe.StaleShardMap, Exit.CONFLICT),
    (pe.KeyMoved, Exit.CONFLICT),
    (pe.ConsumerGated, Exit.CONFLICT),
]


# SQLSTATEs of a connection that failed or was closed by the server (the rest of class 57 is not)
_CONNECTION_STATES = ("57P01", "57P02", "57P03")


def exit_code_for(exc: BaseException) -> Exit:
    """The exit code of an exception raised while running a command."""
    for cls, code in _CLASS_CODES:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return Exit.PERMISSION
    if _schema_missing(exc):
        return Exit.SCHEMA
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if state.startswith(("22", "54")):
            return Exit.INVALID  # data exception, or input too large / too deep for the server
        if state.startswith(("40", "55")):
            return Exit.CONFLICT  # serialization failure, deadlock, lock not available: try again
        if isinstance(exc, psycopg.OperationalError) and (
            not state or state.startswith("08") or state in _CONNECTION_STATES
        ):
            return Exit.CONNECTION
    return Exit.OTHER


def _schema_missing(exc: BaseException) -> bool:
    if isinstance(exc, psycopg.errors.InvalidSchemaName):
        return True
    if isinstance(exc, (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable)):
        return "pglogq." in str(exc) or "pglogq" in (exc.diag.message_primary or "")
    return False


# The SQL API's hints name SQL functions and arguments; at the command line the same advice is
# a command or an option.  Applied in order, to the text of a hint (never to a message).
CLI_HINTS: list[tuple[str, str]] = [
    (", or client.install_schema() in Python", ""),
    ("pglogq.queue_info() lists the queues", "`pglogq queue list` lists the queues"),
    ("pglogq.consumer_info(queue) lists its consumers", "`pglogq consumer list QUEUE` lists its consumers"),
    ("pglogq.consumer_info() lists the consumers", "`pglogq consumer list` lists the consumers"),
    ("to_position => 'earliest' or 'latest'", "--to earliest or --to latest"),
    ("to_position => 'earliest'", "--to earliest"),
    ("pglogq.seek(..., force => true)", "`pglogq consumer seek QUEUE CONSUMER --to ... --force --execute`"),
    ("(force => true)", "(--force)"),
    ("pass force => true", "pass --force"),
    ("tick the queue (pglogq.force_tick)", "tick the queue (`pglogq ticker run --once`)"),
    ("raise it with set_queue_config(queue, 'max_payload_bytes', ...)",
     "raise it with `pglogq queue config QUEUE max_payload_bytes N`"),
]


def cli_hint(hint: str | None) -> str | None:
    """A hint of the SQL API in the command line's terms."""
    if not hint:
        return hint
    for sql_words, cli_words in CLI_HINTS:
        hint = hint.replace(sql_words, cli_words)
    return hint


def to_cli_error(exc: BaseException) -> CliError:
    """One line in the user's terms, with the exit code of the error's class."""
    if isinstance(exc, CliError):
        return exc
    code = exit_code_for(exc)
    if isinstance(exc, pe.PglogqError):
        return CliError(exc.message, code, hint=cli_hint(exc.hint))
    if code == Exit.SCHEMA and isinstance(exc, psycopg.Error):
        return CliError(
            "pglogq is not installed in this database (or is an older version)",
            code,
            hint="run `pglogq schema install` (or `pglogq schema upgrade`)",
        )
    if code == Exit.CONNECTION:
        text = str(exc).strip().splitlines()
        return CliError(f"cannot connect to the database: {text[0] if text else type(exc).__name__}", code)
    if isinstance(exc, psycopg.Error):
        diag = exc.diag
        msg = diag.message_primary or str(exc).strip().splitlines()[0]
        return CliError(msg, code, hint=cli_hint(diag.message_hint))
    return CliError(f"{type(exc).__name__}: {exc}", code, hint="rerun with --debug for the traceback")
