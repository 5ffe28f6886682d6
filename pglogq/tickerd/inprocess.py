"""The ticker inside your process, for small apps and tests: one call to start, one to stop.

::

    handle = pglogq.start_ticker(dsn)          # a background thread
    ...
    handle.stop()

    handle = pglogq.start_async_ticker(dsn)    # an asyncio task in the running loop
    ...
    await handle.stop()

It is the daemon's engine (:mod:`pglogq.tickerd.engine`): it takes the database's ticker lock,
so it stands by while a ``pglogq-ticker`` daemon (or another in-process ticker) is active and
takes over when that one goes away.  It runs maintenance too (retries come back, tables rotate).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from datetime import timedelta
from typing import Any

from pglogq.dsn import resolve_dsn
from pglogq.tickerd.engine import Engine, State, Stats
from pglogq.tickerd.settings import Settings, parse_duration

_DURATION_FIELDS = {"busy_interval", "idle_interval", "linger", "maint_interval", "rotate_interval",
                    "check_interval", "standby_retry", "backoff_min", "backoff_max", "connect_timeout",
                    "tick_statement_timeout", "maint_statement_timeout", "maint_lock_timeout"}


def _dsn_of(dsn_or_client: Any) -> str:
    if dsn_or_client is None:
        return resolve_dsn(None)
    if isinstance(dsn_or_client, str):
        return dsn_or_client
    dsn = getattr(dsn_or_client, "dsn", None)
    if not dsn:
        raise ValueError("this client has no DSN (it was built from a pool): pass the DSN to the ticker")
    return str(dsn)


def _settings(dsn: str, settings: Settings | None, overrides: dict[str, Any]) -> Settings:
    base = settings or Settings(application_name="pglogq-ticker-inproc")
    if "interval" in overrides:
        overrides["busy_interval"] = overrides.pop("interval")
    values: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in _DURATION_FIELDS:
            values[key] = value.total_seconds() if isinstance(value, timedelta) else parse_duration(value)
        else:
            values[key] = value
    return base.with_(dsns=(dsn,), **values)


class TickerHandle:
    """A ticker running in a background thread (see :func:`start_ticker`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"pglogq-ticker {engine.label}", daemon=True)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._ready.set()
        try:
            loop.run_until_complete(self.engine.run())
        except BaseException as exc:  # pragma: no cover - kept for the caller to inspect
            self.error = exc
        finally:
            loop.close()

    @property
    def state(self) -> State:
        return self.engine.stats.state

    @property
    def stats(self) -> Stats:
        return self.engine.stats

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait_active(self, timeout: float = 30.0) -> bool:
        """Wait until this ticker is the database's active one; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state == State.ACTIVE:
                return True
            if not self.running:
                return False
            time.sleep(0.01)
        return self.state == State.ACTIVE

    def stop(self, timeout: float = 10.0) -> None:
        """Stop ticking, close the connections (releasing the lock) and join the thread."""
        self._ready.wait()
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(self.engine.request_stop)
        self._thread.join(timeout)

    def __enter__(self) -> TickerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class AsyncTickerHandle:
    """A ticker running as an asyncio task (see :func:`start_async_ticker`)."""

    def __init__(self, engine: Engine, task: asyncio.Task[None]) -> None:
        self.engine = engine
        self.task = task

    @property
    def state(self) -> State:
        return self.engine.stats.state

    @property
    def stats(self) -> Stats:
        return self.engine.stats

    async def wait_active(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state == State.ACTIVE:
                return True
            if self.task.done():
                return False
            await asyncio.sleep(0.01)
        return self.state == State.ACTIVE

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop ticking and close the connections (releasing the lock)."""
        self.engine.request_stop()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except asyncio.TimeoutError:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def __aenter__(self) -> AsyncTickerHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def start_ticker(dsn_or_client: Any = None, *, settings: Settings | None = None, **overrides: Any) -> TickerHandle:
    """Start a ticker for one database in a background thread and return its handle.

    ``dsn_or_client``: a DSN, a :class:`pglogq.Client`/:class:`pglogq.AsyncClient` (its DSN is
    used), or ``None`` (the DSN rule).  ``overrides``: any :class:`~pglogq.tickerd.Settings` field,
    e.g. ``interval=0.005``, ``idle_interval="200ms"``, ``rotate_interval=1``, ``maintenance=False``.
    """
    dsn = _dsn_of(dsn_or_client)
    engine = Engine(dsn, _settings(dsn, settings, dict(overrides)))
    handle = TickerHandle(engine)
    handle._thread.start()
    return handle


def start_async_ticker(
    dsn_or_client: Any = None, *, settings: Settings | None = None, **overrides: Any
) -> AsyncTickerHandle:
    """Start a ticker as a task of the running event loop; ``await handle.stop()`` to stop it."""
    loop = asyncio.get_running_loop()
    dsn = _dsn_of(dsn_or_client)
    engine = Engine(dsn, _settings(dsn, settings, dict(overrides)))
    return AsyncTickerHandle(engine, loop.create_task(engine.run(), name=f"pglogq-ticker {engine.label}"))
