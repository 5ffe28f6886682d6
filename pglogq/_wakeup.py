# generated from pglogq/_wakeup_async.py by python -m tests.tools.unasync; do not edit
# (change the async source and regenerate)
"""The wake-up of a consumer's receive loop: LISTEN for the ticker's NOTIFY, prove that it arrives
(a probe), and poll when it cannot.

``pglogq/_wakeup.py`` (threads) is generated from this file by ``python -m tests.tools.unasync``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from pglogq import _concurrency, _queries
from pglogq.client import Client

log = logging.getLogger("pglogq.consumer")

AnyConn = psycopg.Connection[Any]

LISTEN_RETRY = 5.0
"""Seconds before a listener that failed (connect, probe or LISTEN) is tried again; the wait
doubles at each failure in a row, up to ``LISTEN_RETRY_MAX``."""

LISTEN_RETRY_MAX = 60.0


def send_probe(client: Client, channel: str) -> None:
    """Notify ``channel`` from a connection of ``client`` (not the listener's): a listener's probe."""
    with client.connection() as conn:
        conn.execute(_queries.NOTIFY, (channel,), prepare=False)


class Wakeup:
    """Waits for the ticker's NOTIFY on channel ``pglogq.<queue>`` on a dedicated connection.

    ``conninfo`` None: no listener at all, plain sleeping (a pooled DSN and no ``listen_dsn``).
    When the listener connects it proves that notifications reach it: it LISTENs on a probe
    channel of its own, ``send_probe`` notifies that channel from another connection, and if the
    probe completes without its notification arriving within ``probe_timeout`` seconds it warns
    at once (a transaction-mode pooler hands the LISTEN to a server connection that goes back to
    the pool) and sleeps instead from then on.  A listener that cannot connect, or whose
    connection fails during the probe or the LISTEN (a server restart, a failover,
    pg_terminate_backend), is no such proof: it sleeps meanwhile and tries again after
    ``LISTEN_RETRY`` seconds (doubling at each failure in a row, up to ``LISTEN_RETRY_MAX``),
    within the same wait when the wait is longer.  A listener connection that breaks while
    waiting is reconnected on the next wait."""

    def __init__(
        self,
        conninfo: str | None,
        queue: str,
        stop: Any,
        send_probe: Callable[[str], _concurrency.Result] | None = None,
        probe_timeout: float = 2.0,
    ) -> None:
        self.conninfo = conninfo
        self.channel = f"pglogq.{queue}"
        self.probe_channel = f"pglogq.probe.{secrets.token_hex(8)}"
        self._stop = stop
        self._send_probe = send_probe
        self._probe_timeout = probe_timeout
        self._conn: AnyConn | None = None
        # a wait on the connection's socket in progress; a reconnect asked for meanwhile (another
        # slot's health check) is left to that wait, which ends at once: closed under it, the
        # connection's descriptor could be reused by another connection while still waited on
        self._waiting = False
        self._redo = False
        self._interrupt = _concurrency.Event()
        self._retry_at = 0.0
        self._failures = 0
        self.reconnects = 0
        self.deaf = conninfo is None
        """True when this wakeup only sleeps: no listener, or its probe proved it deaf."""

    def _connection(self) -> AnyConn | None:
        if self.deaf:
            return None
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if time.monotonic() < self._retry_at:
            return None
        try:
            conn = psycopg.Connection.connect(
                self.conninfo or "", autocommit=True, connect_timeout=5, prepare_threshold=None
            )
        except psycopg.Error as exc:
            self._failed("cannot LISTEN on %s (%s); polling meanwhile, trying again in %g s", exc)
            return None
        step = "probe"
        try:
            arrived = self._send_probe is None or self._probe(conn)
            if arrived:
                step = "LISTEN"
                # after the probe: a tick missed meanwhile waits at most one poll_interval
                conn.execute(sql.SQL(_queries.LISTEN).format(sql.Identifier(self.channel)))
        except psycopg.Error as exc:
            # the connection broke or the server refused: nothing says that notifications cannot
            # arrive (only a probe that completes without its notification says so)
            self._failed(f"the listener of %s failed during its {step} (%s); polling meanwhile, "
                         "trying again in %g s", exc)
            with contextlib.suppress(psycopg.Error):
                conn.close()
            return None
        if not arrived:
            log.warning(
                "tick notifications cannot arrive on the listener connection of %s: a probe NOTIFY sent "
                "from another connection did not come back within %g s (is the DSN a PgBouncer in "
                "transaction mode? LISTEN needs a direct connection: give listen_dsn); polling instead",
                self.channel, self._probe_timeout,
            )
            self.deaf = True
            with contextlib.suppress(psycopg.Error):
                conn.close()
            return None
        self._failures = 0
        self._conn = conn
        return conn

    def _failed(self, message: str, exc: BaseException) -> None:
        """Log a failed listener and set when to try again (later at each failure in a row)."""
        self._failures += 1
        delay = min(LISTEN_RETRY * 2 ** min(self._failures - 1, 16), LISTEN_RETRY_MAX)
        self._retry_at = time.monotonic() + delay
        log.warning(message, self.channel, exc, delay)

    def _probe(self, conn: AnyConn) -> bool:
        """True when a NOTIFY on the probe channel, sent from another connection, arrives here
        (or when stopping); False when the probe completed without it.  Raises psycopg.Error when
        the probe could not complete (the listener connection broke): that proves nothing."""
        assert self._send_probe is not None
        conn.execute(sql.SQL(_queries.LISTEN).format(sql.Identifier(self.probe_channel)))
        self._send_probe(self.probe_channel)
        deadline = time.monotonic() + self._probe_timeout
        arrived = False
        while not arrived and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for n in conn.notifies(timeout=min(left, 0.25)):
                arrived = arrived or n.channel == self.probe_channel
        # a round trip on the same connection: the probe completed (its notification, had it
        # come, was not lost with a broken connection)
        conn.execute(sql.SQL(_queries.UNLISTEN).format(sql.Identifier(self.probe_channel)))
        return arrived or self._stop.is_set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True when a notification came (False: timeout/stop, or
        the listener came back during the wait, or has just LISTENed: the caller looks for what
        came meanwhile)."""
        deadline = time.monotonic() + timeout
        fresh = self._conn is None or self._conn.closed
        conn = self._connection()
        if conn is not None and fresh:
            # LISTENing from now on, not before: a tick written since the caller's last receive
            # sent its NOTIFY to no one.  The caller receives once more before it waits (a worker
            # started as events were sent waited a whole poll_interval for them)
            return False
        if conn is None:
            while not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not self.deaf:
                    # a listener that failed is tried again when due, not after a long poll_interval
                    left = min(left, max(self._retry_at - time.monotonic(), 0.0))
                _concurrency.wait_event(self._stop, left)
                if self.deaf or self._stop.is_set() or time.monotonic() >= deadline:
                    continue
                if self._connection() is not None:
                    break
            return False
        got = False
        self._waiting = True
        try:
            while not self._stop.is_set() and not self._redo:
                # what came (also what the last statement read with its result), all of it:
                # notifications that queued up meanwhile are swallowed with the first
                for _ in conn.notifies(timeout=0.0):
                    got = True
                left = deadline - time.monotonic()
                if got or left <= 0:
                    break
                _concurrency.wait_readable(conn, (self._stop, self._interrupt), left)
        except (psycopg.Error, OSError, ValueError) as exc:
            log.warning("the listener connection of %s broke (%s): reconnecting; polling meanwhile",
                        self.channel, exc)
            self._redo = True
        finally:
            self._waiting = False
        if self._redo:
            self.reconnect()
        return got

    @property
    def listening(self) -> bool:
        """True while a listener connection is open and LISTENing (its probe passed)."""
        return self._conn is not None and not self._conn.closed

    def reconnect(self) -> None:
        """Drop the listener connection; the next wait opens a new one and LISTENs again.  While
        a wait uses it, that wait drops it, at once."""
        if self._waiting:
            self._redo = True
            self._interrupt.set()
            return
        self._redo = False
        self._interrupt = _concurrency.Event()
        conn, self._conn = self._conn, None
        self.reconnects += 1
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


class AsyncSharedWakeup:
    """One listener for several receive loops of one consumer (a share consumer's handler slots):
    one LISTEN connection per consumer process instead of one per slot.

    At any time at most one waiting loop waits on the listener (:class:`Wakeup`); the others
    wait for a bell that rings when it returns.  A notification wakes every waiting loop (each
    receives: a tick may hold work for all of them); a wait that ends otherwise hands the listener
    to the next waiting loop, so a notification that arrives meanwhile stays on the connection
    and is read by that loop.  ``stop`` (the consumer's) ends every wait."""

    def __init__(self, wakeup: Wakeup) -> None:
        self.wakeup = wakeup
        self.channel = wakeup.channel
        self._stop = wakeup._stop
        # taken without blocking only, so a thread lock serves asyncio too
        self._listening = threading.Lock()
        self._news = 0  # notifications received so far
        self._bell = _concurrency.Event()

    def _ring(self, news: bool) -> None:
        if news:
            self._news += 1  # first: a waiter that reads the new bell sees the count changed
        bell, self._bell = self._bell, _concurrency.Event()
        bell.set()

    def wait(self, timeout: float) -> bool:
        """As :meth:`Wakeup.wait`, shared: True when a notification came meanwhile."""
        deadline = time.monotonic() + timeout
        seen = self._news
        while not self._stop.is_set():
            bell = self._bell
            if self._news != seen:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._listening.acquire(blocking=False):
                got = False
                try:
                    got = self.wakeup.wait(left)
                finally:
                    self._listening.release()
                    self._ring(got)
                return got
            _concurrency.wait_event(bell, left)
        return False

    @property
    def listening(self) -> bool:
        return self.wakeup.listening

    @property
    def deaf(self) -> bool:
        return self.wakeup.deaf

    @property
    def reconnects(self) -> int:
        return self.wakeup.reconnects

    def reconnect(self) -> None:
        self.wakeup.reconnect()

    def close(self) -> None:
        """Nothing: the consumer closes the listener once all its loops have ended (:meth:`shut`)."""

    def shut(self) -> None:
        """Close the listener and wake every waiting loop."""
        self.wakeup.close()
        self._ring(False)
