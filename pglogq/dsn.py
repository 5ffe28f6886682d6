"""Where the database comes from: one rule for the library, the CLI, the daemon and tests.

1. an explicit DSN (an argument, or ``--dsn`` on the command line);
2. the ``PGLOGQ_DSN`` environment variable;
3. the embedded PostgreSQL (:mod:`pglogq.embedded`), started on demand and announced on stderr.
"""

from __future__ import annotations

import os


def resolve_dsn(explicit: str | None = None, *, announce: bool = True) -> str:
    """The DSN to use, following the project's rule."""
    if explicit:
        return explicit
    env = os.environ.get("PGLOGQ_DSN")
    if env:
        return env
    from pglogq.embedded import embedded_dsn

    return embedded_dsn(announce=announce)


def is_embedded(dsn: str) -> bool:
    """Whether a DSN points at the embedded server of this machine."""
    from pglogq.embedded import data_dir

    return str(data_dir()) in dsn


def check_dsn(dsn: str, where: str) -> None:
    """Refuse a DSN libpq cannot parse (a usage error: it can never connect), without echoing it
    (it may hold a password)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0].replace(dsn, "<the DSN>")
        raise ValueError(f"invalid DSN in {where}: {why}; use a URI (postgresql://user@host/db)"
                         " or key=value pairs (host=... dbname=...)") from exc
