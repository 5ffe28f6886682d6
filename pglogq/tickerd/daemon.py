"""The ``pglogq-ticker`` process: one :class:`~pglogq.tickerd.engine.Engine` per database, signals,
reload, the metrics server, and ``--once``.

Signals: SIGTERM and SIGINT stop cleanly (each engine finishes its statement, closes its
connections and so releases its lock); SIGHUP re-reads the env file and the environment,
re-applies the log settings, and restarts every engine (new DSNs and intervals, fresh
connections).  The metrics address is read at start only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

from psycopg.conninfo import conninfo_to_dict

from pglogq.tickerd import logs
from pglogq.tickerd.engine import Engine, database_label
from pglogq.tickerd.logs import emit
from pglogq.tickerd.settings import Settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 3


def labels_for(dsns: tuple[str, ...]) -> list[str]:
    """Short, distinct names for the databases (the database name; host/port when ambiguous)."""
    base = [database_label(d) for d in dsns]
    out = []
    for d, b in zip(dsns, base, strict=True):
        if base.count(b) == 1:
            out.append(b)
            continue
        try:
            p = conninfo_to_dict(d)
        except Exception:
            p = {}
        out.append(f"{p.get('host') or 'local'}:{p.get('port') or 5432}/{b}")
    seen: dict[str, int] = {}
    final = []
    for lab in out:
        seen[lab] = seen.get(lab, 0) + 1
        final.append(lab if seen[lab] == 1 else f"{lab}#{seen[lab]}")
    return final


class Daemon:
    """Runs the engines of every configured database until a stop signal."""

    def __init__(self, settings: Settings, *, reload: Callable[[], Settings] | None = None) -> None:
        self.settings = settings
        self._reload = reload
        self.engines: list[Engine] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._stop_requested = False
        self._reload_requested = False

    def _start_engines(self) -> None:
        self.engines = [Engine(d, self.settings, label=lab)
                        for d, lab in zip(self.settings.dsns, labels_for(self.settings.dsns), strict=True)]
        self._tasks = [asyncio.create_task(e.run(), name=f"ticker {e.label}") for e in self.engines]

    async def _stop_engines(self, timeout: float = 10.0) -> None:
        for e in self.engines:
            e.request_stop()
        if not self._tasks:
            return
        _done, pending = await asyncio.wait(self._tasks, timeout=timeout)
        for t in pending:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def request_stop(self) -> None:
        self._stop_requested = True
        self._wake.set()

    def request_reload(self) -> None:
        self._reload_requested = True
        self._wake.set()

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        for sig, handler in ((signal.SIGTERM, self.request_stop), (signal.SIGINT, self.request_stop),
                             (signal.SIGHUP, self.request_reload)):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, handler)
        server = None
        if self.settings.metrics_port is not None:
            from pglogq.tickerd.metrics import MetricsServer

            try:
                server = MetricsServer(lambda: list(self.engines), self.settings.metrics_host,
                                       self.settings.metrics_port)
            except OSError as exc:
                emit(logging.ERROR, "metrics_failed", f"cannot serve metrics on "
                     f"{self.settings.metrics_host}:{self.settings.metrics_port}: {exc}")
                return EXIT_FAILED
            server.start()
            emit(logging.INFO, "metrics", f"serving /metrics and /healthz on "
                 f"http://{self.settings.metrics_host}:{server.port}/", port=server.port)
        emit(logging.INFO, "started", "pglogq-ticker started", databases=",".join(labels_for(self.settings.dsns)))
        self._start_engines()
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._stop_requested:
                    emit(logging.INFO, "stopping", "stop requested; releasing the ticker locks")
                    break
                if self._reload_requested:
                    self._reload_requested = False
                    await self._do_reload()
        finally:
            await self._stop_engines()
            if server is not None:
                server.stop()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
        emit(logging.INFO, "exit", "pglogq-ticker stopped")
        return EXIT_OK

    async def _do_reload(self) -> None:
        if self._reload is None:
            return
        try:
            new = self._reload()
        except (ValueError, OSError) as exc:
            emit(logging.ERROR, "reload_failed", f"reload failed, keeping the old settings: {exc}")
            return
        if (new.metrics_port, new.metrics_host) != (self.settings.metrics_port, self.settings.metrics_host):
            emit(logging.WARNING, "reload_metrics", "the metrics address changes only on restart")
        logs.configure(new.log_level, new.log_format)
        emit(logging.INFO, "reload", "SIGHUP: settings re-read; reconnecting",
             databases=",".join(labels_for(new.dsns)))
        from pglogq.tickerd.settings import describe

        emit(logging.INFO, "config", "effective configuration", **describe(new))
        await self._stop_engines()
        self.settings = new
        self._start_engines()


async def run_once(settings: Settings) -> int:
    """One pass over every database; the worst exit code wins."""
    engines = [Engine(d, settings, label=lab) for d, lab in zip(settings.dsns, labels_for(settings.dsns), strict=True)]
    codes = await asyncio.gather(*(e.once() for e in engines))
    return max(codes, default=EXIT_OK)
