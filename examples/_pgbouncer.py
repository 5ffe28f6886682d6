"""Start a throw-away PgBouncer in transaction mode in front of a PostgreSQL DSN (for the examples
and the tests; in production PgBouncer is configured once, see docs/howto/pgbouncer.md).

    bouncer = PgBouncer.start(direct_dsn, pool_size=3)
    pooled_dsn = bouncer.dsn(direct_dsn)     # the same database, through pgbouncer
    ...
    bouncer.stop()

It writes a pgbouncer.ini in a temporary directory: every database of the server (``* =``),
``pool_mode = transaction``, ``default_pool_size = pool_size``, ``auth_type = trust`` with an
auth_file naming the DSN's user, listening on a free port of 127.0.0.1.  PgBouncer refuses to
run as root: as root it is started with ``-u nobody``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class PgBouncer:
    """A running pgbouncer process."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, workdir: Path) -> None:
        self.proc = proc
        self.port = port
        self.workdir = workdir

    @staticmethod
    def executable() -> str | None:
        found = shutil.which("pgbouncer")
        if found:
            return found
        return "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None

    @classmethod
    def start(cls, server_dsn: str, *, pool_size: int = 3, timeout: float = 30.0) -> PgBouncer:
        exe = cls.executable()
        if exe is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install -y pgbouncer)")
        server = conninfo_to_dict(server_dsn)
        user = str(server.get("user") or "postgres")
        workdir = Path(tempfile.mkdtemp(prefix="pglogq-pgbouncer-"))
        os.chmod(workdir, 0o777)
        target = {"host": server.get("host") or "/tmp", "port": server.get("port") or "5432"}
        if server.get("password"):
            target["password"] = str(server["password"])
        port = _free_port()
        (workdir / "users.txt").write_text(f'"{user}" ""\n')
        (workdir / "pgbouncer.ini").write_text(
            "[databases]\n"
            "* = " + " ".join(f"{k}={_quote(str(v))}" for k, v in target.items()) + "\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {workdir / 'users.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmin_pool_size = 0\n"
            "reserve_pool_size = 0\nmax_client_conn = 500\nserver_round_robin = 0\n"
            f"logfile = {workdir / 'pgbouncer.log'}\npidfile = {workdir / 'pgbouncer.pid'}\n"
            "ignore_startup_parameters = extra_float_digits,options\nquery_wait_timeout = 60\n"
        )
        for f in workdir.iterdir():
            os.chmod(f, 0o666)
        cmd = [exe, str(workdir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            # pgbouncer will not run as root: run it as the user that may reach the server's
            # socket directory (an embedded server's data directory is private to its owner)
            host = str(target["host"])
            runas = Path(host).owner() if host.startswith("/") and Path(host).is_dir() else "nobody"
            cmd[1:1] = ["-u", "nobody" if runas == "root" else runas]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        bouncer = cls(proc, port, workdir)
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(bouncer.dsn(server_dsn), connect_timeout=2).close()
                return bouncer
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                    bouncer.stop()
                    raise RuntimeError(f"pgbouncer did not start: {out}") from None
                time.sleep(0.1)

    def dsn(self, direct: str) -> str:
        """``direct``'s database and user, through this pgbouncer."""
        parts = conninfo_to_dict(direct)
        extra = {"password": str(parts["password"])} if parts.get("password") else {}
        return make_conninfo("", host="127.0.0.1", port=str(self.port), dbname=str(parts.get("dbname") or "postgres"),
                             user=str(parts.get("user") or "postgres"), **extra)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
