"""Fixtures of the integration tests: a real PgBouncer in transaction mode.

``pgbouncer`` starts Debian's ``pgbouncer`` (apt-get install pgbouncer; .ci/run does) once per
session in front of the test server: transaction pooling, a pool of 3 server connections per
database and user, ``auth_type = trust``, listening on a free port of 127.0.0.1; stopped at the
end.  ``pooled_dsn`` is the test's fresh database seen through it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

POOL_SIZE = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class PgBouncer:
    """A running pgbouncer; :meth:`dsn` maps a direct DSN of the test server to one through it."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir

    def dsn(self, direct: str) -> str:
        parts = conninfo_to_dict(direct)
        return make_conninfo(
            "", host="127.0.0.1", port=str(self.port), dbname=parts.get("dbname") or "postgres",
            user=parts.get("user") or "postgres", **({"password": parts["password"]} if parts.get("password") else {}),
        )

    def log(self) -> str:
        path = self.workdir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="session")
def pgbouncer(server_dsn: str) -> Iterator[PgBouncer]:
    exe = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
    if exe is None:
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer)")
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
        + "* = " + " ".join(f"{k}={_quote(str(v))}" for k, v in target.items()) + "\n"
        + "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {POOL_SIZE}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
        "max_client_conn = 500\nmax_db_connections = 0\nserver_round_robin = 0\n"
        f"logfile = {workdir / 'pgbouncer.log'}\npidfile = {workdir / 'pgbouncer.pid'}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        "query_wait_timeout = 60\nserver_check_delay = 1\n"
    )
    for f in workdir.iterdir():
        os.chmod(f, 0o666)
    # pgbouncer refuses to run as root: -u drops to an unprivileged user
    cmd = [exe, str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:
        cmd[1:1] = ["-u", "nobody"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(port, workdir)
    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(bouncer.dsn(server_dsn), connect_timeout=2).close()
            break
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                proc.kill()
                pytest.fail(f"pgbouncer did not start: {out}\n{bouncer.log()}")
            time.sleep(0.1)
    yield bouncer
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout:
        proc.stdout.close()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def pooled_dsn(pgbouncer: PgBouncer, dsn: str) -> str:
    """The test's fresh database, through pgbouncer in transaction mode."""
    return pgbouncer.dsn(dsn)


@pytest.fixture
def through_pgbouncer(pgbouncer: PgBouncer) -> Callable[[str], str]:
    return pgbouncer.dsn
