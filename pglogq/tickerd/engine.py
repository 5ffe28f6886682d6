"""The ticker of one database: the lock, the tick loop, maintenance, restore checks, reconnects.

One :class:`Engine` per database, running as an asyncio task (the daemon runs one per ``--dsn``;
:mod:`pglogq.tickerd.inprocess` runs one in a thread or in the caller's event loop).

* **One active ticker per database.**  The ticking connection takes a session-level advisory
  lock (``pg_try_advisory_lock``).  Other tickers stand by and retry every ``standby_retry``
  seconds.  The lock lives and dies with the connection: when the active ticker is killed, the
  server ends its backend and releases the lock, and a standby takes over.  So the ticker needs
  a direct connection: a DSN that leads through a connection pooler in transaction mode
  (PgBouncer) is refused (state "refused", re-checked every ``check_interval``; ``--once``
  exits 3), detected by two connections answering from one backend
  (:meth:`Engine._require_direct`, the one check every way of ticking makes).
* **Ticking.**  ``SELECT pglogq.ticker()`` in its own autocommit transaction, every
  ``busy_interval`` (5 ms) while ticks that close events are being written and for ``linger``
  (1 s) after the last one; then the interval doubles up to ``idle_interval`` (200 ms).  A
  keep-alive tick does not count: with many idle queues one falls due every few milliseconds,
  and kept the daemon polling at the busy pace.  A call cut short with queues still due is
  followed by the next one after ``busy_interval``, at the pace it had before: the SQL writes
  keep-alives falling due close together in one pass, and a batch over its bound of 20 queues
  started a second of busy polling.
  With the default ``ticker_max_lag = 0`` the SQL writes a tick whenever committed events wait,
  so an event waits at most one poll interval for its tick.  When nothing happens a poll costs
  one cheap read-only statement per ``idle_interval``, and no tick is written except the
  queue's keep-alive.  ``linger`` after the last tick of events, with nothing to tick, the
  daemon sleeps (``pglogq.ticker_sleep``): it stops polling until a send's NOTIFY (sends notify
  only while a ticker sleeps) or its next keep-alive, at most ``sleep_max``; the first event
  after a pause is then ticked as soon as it commits, instead of up to a poll interval later.
  The backed-off pace is that of a daemon that cannot sleep (``sleep_max`` 0, a role without
  ``ticker_sleep``, a queue with ``ticker_max_lag``).
* **Maintenance** runs on a second connection (its own task, with ``lock_timeout`` and
  ``statement_timeout``) so that it never holds up ticking: every ``maint_interval`` it asks
  ``pglogq.maint_operations()`` what is due and runs each step with ``pglogq.maint_run()`` in its
  own transaction; the retry/delayed pump and rotation step 2 run at once, rotation step 1 and
  pruning at most every ``rotate_interval`` per queue (step 2 follows a successful step 1 at
  once, in a separate transaction).  A pass with a schedule due also sends what schedules are due
  (:func:`pglogq.schedules.fire_due`, at most ``schedules.PER_PASS`` due times a pass, the
  longest due first: the rest wait for the next pass, never the other steps).  Every
  ``check_interval`` it re-runs the restore check.
* **Faults.**  Lost or refused connections are retried with exponential backoff (jittered,
  ``backoff_min`` to ``backoff_max``), each failure logged once per attempt.  A database that
  looks restored into a cluster whose txids are behind (``ticker_check`` PQ040, or ``ticker``
  PQ015) is refused: the engine stops ticking it, says why, and re-checks every
  ``check_interval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pglogq import _concurrency_async, schedules
from pglogq.errors import translate
from pglogq.tickerd import queries as q
from pglogq.tickerd.logs import LOGGER, emit
from pglogq.tickerd.settings import Settings

AConn = psycopg.AsyncConnection[Any]


class State(str, enum.Enum):
    CONNECTING = "connecting"
    STANDBY = "standby"
    ACTIVE = "active"
    REFUSED = "refused"
    STOPPED = "stopped"


@dataclass
class Stats:
    """What an engine has done; read by the metrics endpoint and /healthz."""

    state: State = State.CONNECTING
    state_since: float = field(default_factory=time.time)
    detail: str = ""
    polls: int = 0
    ticks: int = 0
    errors: int = 0
    reconnects: int = 0
    maintenance: dict[str, int] = field(default_factory=dict)
    last_poll_at: float | None = None
    last_tick_at: float | None = None
    active_since: float | None = None
    poll_interval: float | None = None
    """The seconds to the next poll, as last chosen: busy_interval while events flow, up to
    idle_interval after, until a NOTIFY or the next keep-alive (at most sleep_max) asleep."""
    maint_pause: float | None = None
    """The seconds of maintenance's pause after its last pass, as chosen (``maint_pause``)."""


class Refused(Exception):
    """The database must not be ticked (restored into a cluster whose txids are behind)."""


class SchemaMissing(Exception):
    """The pglogq schema (or its ticker functions) is not installed in the database."""


def database_label(dsn: str) -> str:
    """A short name for a DSN in logs and metrics: its database name."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "?"
    return str(params.get("dbname") or params.get("user") or os.environ.get("PGDATABASE") or "postgres")


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, psycopg.Error):
        mine = translate(exc)
        if mine is not exc:
            return str(mine)
        text = (exc.diag.message_primary or str(exc)).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    return str(exc) or type(exc).__name__


def maint_pause(s: Settings, *, listed: bool, ticker_asleep: bool, next_due: float | None) -> float:
    """The pause of maintenance after a pass.

    ``maint_interval`` after a pass that listed a step, or while the ticker is awake; while it
    sleeps (whatever gives maintenance work then wakes it, and so maintenance) the pause is
    ``maint_idle_interval``, ended early when a retry, delayed send, schedule, rotation or
    release falls due (``next_due`` seconds from now, ``pglogq.maint_next_due``)."""
    if listed or not ticker_asleep:
        return s.maint_interval
    longer = s.maint_idle_interval if next_due is None else min(s.maint_idle_interval, next_due)
    return max(longer, s.maint_interval)


def pace(s: Settings, interval: float, since_flow: float, *, flow: bool, cut_short: bool) -> tuple[float, float]:
    """The ticking pace after a call, and the pause before the next one: ``(interval, pause)``.

    ``interval`` is the pace so far, ``since_flow`` the seconds since the last call whose ticks
    closed events.  Events flowing (``flow``) set the busy pace; ``linger`` after the last of
    them the pace doubles up to ``idle_interval``.  A call cut short with queues still due
    (``cut_short``) is followed after ``busy_interval`` whatever the pace, which it leaves as
    it was: keep-alives are no sign of flow, and the SQL writes those falling due close together
    in one batch (over its bound of 20 queues, a batch started a second of busy polling)."""
    if flow:
        interval = s.busy_interval
    elif since_flow >= s.linger and not cut_short:
        interval = min(interval * 2, s.idle_interval)
    return interval, s.busy_interval if cut_short else interval


class Engine:
    """Ticks and maintains one database until :meth:`request_stop` (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        settings: Settings,
        *,
        label: str | None = None,
        logger: logging.Logger = LOGGER,
    ) -> None:
        self.dsn = dsn
        self.settings = settings
        self.label = label or database_label(dsn)
        self.log = logger
        self.stats = Stats()
        self._stop = asyncio.Event()
        self._stopping = False
        self._refused: Refused | None = None
        self._can_sleep = False
        # the ticker sleeps (maintenance may pause), and is set when it wakes (maintenance passes)
        self._ticker_asleep = False
        self._maint_wake = asyncio.Event()
        # of the last maintenance pass: whether maint_operations listed a step, and the seconds
        # until one falls due by time alone (None: none waits)
        self._maint_due: tuple[bool, float | None] = (True, None)
        self._ident = f"{socket.gethostname()}:{os.getpid()}"

    # -- control --------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask :meth:`run` to return (call in the engine's event loop)."""
        self._stopping = True
        self._stop.set()
        self._maint_wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def _sleep(self, seconds: float) -> None:
        if self._stopping:
            return
        if seconds <= 0.25:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    def _emit(self, level: int, event: str, msg: str, **fields: Any) -> None:
        emit(level, event, msg, logger=self.log, db=self.label, **fields)

    def _set_state(self, state: State, detail: str = "") -> None:
        if state != self.stats.state:
            self.stats.state = state
            self.stats.state_since = time.time()
            self.stats.active_since = time.time() if state == State.ACTIVE else None
        self.stats.detail = detail

    # -- connections ----------------------------------------------------------------------

    async def _connect(self, role: str) -> AConn:
        conn: AConn = await psycopg.AsyncConnection.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=max(1, round(self.settings.connect_timeout)),
            application_name=f"{self.settings.application_name} {role} {self._ident}"[:63],
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
        return conn

    @staticmethod
    async def _timeouts(conn: AConn, statement: float, lock: float) -> None:
        await conn.execute(q.SESSION_TIMEOUTS, (f"{int(statement * 1000)}ms", f"{int(lock * 1000)}ms"))

    async def _schema_ready(self, conn: AConn) -> None:
        row = await (await conn.execute(q.SCHEMA_READY)).fetchone()
        if not row or not row[0]:
            raise SchemaMissing("the pglogq schema is not installed (run `pglogq schema install`)")
        if not row[1] or not row[3]:
            raise SchemaMissing("the pglogq schema is older than this ticker (run `pglogq schema install`)")
        # a schema of before ticker_sleep, or a role that may not call it: the daemon polls at its
        # idle pace, never sleeps
        self._can_sleep = bool(row[2]) and self.settings.sleep_max > 0

    async def _try_lock(self, conn: AConn) -> bool:
        row = await (await conn.execute(q.TRY_LOCK, (q.LOCK_KEY,))).fetchone()
        return bool(row and row[0])

    async def _holder(self, conn: AConn) -> str:
        try:
            row = await (await conn.execute(q.LOCK_HOLDER, (q.LOCK_CLASSID, q.LOCK_OBJID))).fetchone()
        except psycopg.OperationalError:
            raise
        except psycopg.Error:
            return "unknown"
        if not row:
            return "unknown"
        return f"pid {row[0]} ({row[1] or 'no application_name'}, from {row[2]})"

    async def _check(self, conn: AConn, *, save: bool = True) -> None:
        """Restore detection (pglogq.ticker_check); raises :class:`Refused`."""
        try:
            row = await (await conn.execute(q.TICKER_CHECK, (save,))).fetchone()
        except psycopg.Error as exc:
            if exc.sqlstate in ("PQ040", "PQ015"):
                raise Refused(_error_text(exc)) from exc
            raise
        assert row is not None
        system_id, previous, txid, seen, status = row
        if status == "first run":
            self._emit(logging.INFO, "first_run", "first ticker run on this database: recorded its cluster",
                       system_id=system_id, txid=txid)
        elif status == "new cluster":
            self._emit(logging.WARNING, "cluster_changed",
                       "this database now lives in another cluster; its txids are ahead, so ticking is safe",
                       system_id=system_id, previous_system_id=previous, txid=txid, max_txid_seen=seen)

    # -- the daemon loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Tick (or stand by) until :meth:`request_stop`; reconnects by itself."""
        s = self.settings
        delay = s.backoff_min
        first = True
        try:
            while not self._stopping:
                conn: AConn | None = None
                started = time.monotonic()
                try:
                    self._set_state(State.CONNECTING, self.stats.detail)
                    conn = await self._connect("tick")
                    if not first:
                        self.stats.reconnects += 1
                        self._emit(logging.INFO, "reconnected", "connected to the database again")
                    first = False
                    await self._session(conn)
                except Refused as exc:
                    self._set_state(State.REFUSED, str(exc))
                    self._emit(logging.ERROR, "refused",
                               f"refusing to tick this database: {exc}; will check again in "
                               f"{s.check_interval:g}s")
                    if conn is not None:
                        await conn.close()
                        conn = None
                    await self._sleep(s.check_interval)
                    continue
                except SchemaMissing as exc:
                    self.stats.errors += 1
                    self._set_state(State.CONNECTING, str(exc))
                    self._emit(logging.ERROR, "schema_missing", str(exc))
                except psycopg.OperationalError as exc:
                    self.stats.errors += 1
                    what = "connection lost" if self.stats.state != State.CONNECTING else "database unreachable"
                    self._set_state(State.CONNECTING, f"{what}: {_error_text(exc)}")
                    self._emit(logging.WARNING, "connection_lost" if what == "connection lost" else "unreachable",
                               f"{what}: {_error_text(exc)}")
                except psycopg.Error as exc:
                    self.stats.errors += 1
                    self._set_state(State.CONNECTING, _error_text(exc))
                    self._emit(logging.ERROR, "session_error", f"ticker session failed: {_error_text(exc)}",
                               sqlstate=exc.sqlstate)
                except Exception as exc:  # a bug must not end the daemon: say so and start over
                    self.stats.errors += 1
                    self._set_state(State.CONNECTING, _error_text(exc))
                    self.log.exception("unexpected error in the ticker session", extra={
                        "pglogq_event": "internal_error", "pglogq_fields": {"db": self.label}})
                finally:
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            await conn.close()
                if self._stopping:
                    break
                if time.monotonic() - started > 30:
                    delay = s.backoff_min
                wait = delay * random.uniform(0.8, 1.2)
                self._emit(logging.INFO, "retry", f"retrying in {wait:.1f}s")
                await self._sleep(wait)
                delay = min(delay * 2, s.backoff_max)
        finally:
            self._set_state(State.STOPPED)
            self._emit(logging.INFO, "stopped", "ticker stopped")

    async def _behind_pooler(self, conn: AConn) -> bool:
        """True when ``conn`` leads through a transaction-mode pooler (PgBouncer).

        ``SHOW`` and ``inet_server_port()`` cannot tell through a pooler (nor can anything in one
        query); what a pooler cannot hide is that it maps client connections to server
        processes per transaction: two connections open at once answer from the same backend
        pid, or one connection answers from two.  A direct connection never does either."""
        other = await self._connect("probe")
        try:
            for _ in range(3):
                first = await (await conn.execute(q.BACKEND_PID)).fetchone()
                second = await (await other.execute(q.BACKEND_PID)).fetchone()
                again = await (await conn.execute(q.BACKEND_PID)).fetchone()
                if first == second or first != again:
                    return True
            return False
        finally:
            with contextlib.suppress(Exception):
                await other.close()

    async def _require_direct(self, conn: AConn) -> None:
        """Raise :class:`Refused` when ``conn`` leads through a transaction-mode pooler.

        Every way of ticking (the daemon's sessions, ``--once``, the in-process ticker) calls this
        before it takes the lock: the lock is session-level, so through a pooler even one pass
        would leave it on a server connection that other clients then use."""
        if await self._behind_pooler(conn):
            raise Refused(
                "the DSN leads through a connection pooler in transaction mode (PgBouncer?): the same "
                "server process answered two client connections; the ticker needs a direct connection "
                "to PostgreSQL (its one-active-ticker lock is a session-level advisory lock, which a "
                "pooler would hand to other clients): give it the server's own host and port"
            )

    async def _session(self, conn: AConn) -> None:
        s = self.settings
        await self._require_direct(conn)
        await self._timeouts(conn, s.tick_statement_timeout, s.tick_statement_timeout)
        await conn.execute(q.SYNCHRONOUS_COMMIT, (s.tick_synchronous_commit,))
        await conn.execute(q.TICKER_AUTOCOMMIT)
        await self._schema_ready(conn)
        holder = None
        while not self._stopping:
            if await self._try_lock(conn):
                break
            now_holder = await self._holder(conn)
            if now_holder != holder:
                self._emit(logging.INFO, "standby", "another ticker is active on this database; standing by",
                           holder=now_holder)
                holder = now_holder
            self._set_state(State.STANDBY, f"active ticker: {now_holder}")
            await self._sleep(s.standby_retry)
        if self._stopping:
            return
        self._refused = None
        await self._check(conn)
        self._set_state(State.ACTIVE)
        self._emit(logging.INFO, "active", "this ticker is now the active one for the database")
        maint = asyncio.create_task(self._maintain()) if s.maintenance else None
        try:
            await self._tick_loop(conn)
        finally:
            if maint is not None:
                maint.cancel()
                await asyncio.gather(maint, return_exceptions=True)

    async def _tick_loop(self, conn: AConn) -> None:
        s = self.settings
        interval = s.busy_interval
        last_busy = time.monotonic()
        stats = self.stats
        asleep = self._ticker_asleep = False  # a new session holds no lock
        while not self._stopping:
            if self._refused is not None:
                raise self._refused
            started = time.monotonic()
            try:
                cur = await conn.execute(q.TICKER_POLL)
                row = await cur.fetchone()
            except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
                # before OperationalError, their base class: a slow pass is retried on this
                # session, not taken for a lost connection (a new session starts cold, slower)
                stats.errors += 1
                self._emit(logging.WARNING, "tick_timeout", f"tick took too long: {_error_text(exc)}")
                await self._sleep(s.idle_interval)
                continue
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                if exc.sqlstate == "PQ015":
                    raise Refused(_error_text(exc)) from exc
                raise
            now = time.monotonic()
            stats.polls += 1
            stats.last_poll_at = time.time()
            n = int(row[0]) if row and row[0] is not None else 0
            flow = int(row[1]) if row and row[1] else n
            cut_short = bool(row and row[2] and row[2] != "0")
            # seconds until the soonest keep-alive; None: unknown, or a queue may fall due by time
            until = float(row[3]) if row and len(row) > 3 and row[3] is not None else None
            if n:
                stats.ticks += n
                stats.last_tick_at = stats.last_poll_at
            if flow > 0:
                last_busy = now
            interval, pause = pace(s, interval, now - last_busy, flow=flow > 0, cut_short=cut_short)
            stats.poll_interval = pause
            if asleep and (flow > 0 or (until is None and not cut_short)):
                # events ticked, or a queue that may fall due by time alone (ticker_max_lag)
                asleep = await self._awake(conn)
            elif (not asleep and flow == 0 and not cut_short and until is not None and self._can_sleep
                  and now - last_busy >= s.linger and await self._sleep_mode(conn, True)):
                # linger after the last events, not once the pace has backed off to the idle
                # interval (0.3 s later): an event sent meanwhile waited up to a poll interval.
                # No send was in flight: poll once more at once (it sees every event committed
                # before), then sleep: every send from now on notifies (pglogq.ticker_sleep)
                asleep = self._ticker_asleep = True
                continue
            if asleep and cut_short:
                continue  # the rest of the keep-alives due, at once and asleep
            if asleep and until is not None:
                # until a send's NOTIFY or the next keep-alive (polled asleep: the keep-alives
                # written, the session sleeps on), never polling faster than the idle pace
                stats.poll_interval = max(s.idle_interval, min(until, s.sleep_max))
                if await self._until_woken(conn, stats.poll_interval):
                    asleep = await self._awake(conn)
                continue
            # the interval runs from the start of this poll: a slow tick does not add to it
            await self._sleep(max(0.0, pause - (now - started)))

    async def _awake(self, conn: AConn) -> bool:
        """End the sleep, and the pause of maintenance with it.  Returns False (not asleep)."""
        self._ticker_asleep = False
        self._maint_wake.set()
        return await self._sleep_mode(conn, False)

    async def _sleep_mode(self, conn: AConn, asleep: bool) -> bool:
        """Fall asleep (True when the session sleeps now) or wake up (False)."""
        row = await (await conn.execute(q.TICKER_SLEEP, (asleep,))).fetchone()
        return bool(row and row[0])

    async def _until_woken(self, conn: AConn, seconds: float) -> bool:
        """Wait up to ``seconds`` for a notification on ``conn``: True when one came (a send
        committed while the session slept); False at the timeout or a stop request.

        Waits for the socket to be readable, not in ``conn.notifies()``: psycopg's wait wakes
        every 0.1 s to look for interrupts, which was most of the sleeping daemon's CPU."""
        if await self._notified(conn, 0.0):  # read during the last statement
            return True
        # input came (a notification, or the server closing the connection: raised here)
        return (await _concurrency_async.wait_readable(conn, (self._stop,), seconds)
                and await self._notified(conn, 1.0))

    @staticmethod
    async def _notified(conn: AConn, seconds: float) -> bool:
        """True when a notification arrives on ``conn`` within ``seconds`` (0: those read already)."""
        got = False
        async with contextlib.aclosing(conn.notifies(timeout=seconds)) as notes:
            async for _ in notes:
                got = True
                if seconds:
                    break
        return got

    # -- maintenance ----------------------------------------------------------------------

    async def _maintain(self) -> None:
        s = self.settings
        delay = s.backoff_min
        while not self._stopping:
            conn: AConn | None = None
            try:
                conn = await self._connect("maint")
                await self._timeouts(conn, s.maint_statement_timeout, s.maint_lock_timeout)
                delay = s.backoff_min
                last: dict[tuple[str, str], float] = {}
                next_check = time.monotonic() + s.check_interval
                while not self._stopping:
                    # cleared before the pass: a wake-up during it ends the next pause at once
                    self._maint_wake.clear()
                    await self.maintenance_pass(conn, last)
                    if time.monotonic() >= next_check:
                        await self._check(conn)
                        next_check = time.monotonic() + s.check_interval
                    listed, next_due = self._maint_due
                    pause = maint_pause(s, listed=listed, ticker_asleep=self._ticker_asleep, next_due=next_due)
                    self.stats.maint_pause = pause
                    if pause > s.maint_interval:
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(self._maint_wake.wait(), pause)
                    else:
                        await self._sleep(pause)
            except Refused as exc:
                self._refused = exc
                return
            except psycopg.OperationalError as exc:
                self.stats.errors += 1
                self._emit(logging.WARNING, "maintenance_connection_lost",
                           f"maintenance connection lost: {_error_text(exc)}")
            except psycopg.Error as exc:
                self.stats.errors += 1
                self._emit(logging.ERROR, "maintenance_error", f"maintenance failed: {_error_text(exc)}",
                           sqlstate=exc.sqlstate)
            except Exception:  # a bug must not stop maintenance for good
                self.stats.errors += 1
                self.log.exception("unexpected error in maintenance", extra={
                    "pglogq_event": "internal_error", "pglogq_fields": {"db": self.label}})
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await self._sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, s.backoff_max)

    async def maintenance_pass(
        self, conn: AConn, last: dict[tuple[str, str], float], *, everything: bool = False
    ) -> dict[str, int]:
        """Run the steps ``maint_operations()`` says are due; slow ones at most every
        ``rotate_interval`` per queue unless ``everything``.  Returns ``op[:queue]`` → result."""
        rows = await (await conn.execute(q.MAINT_OPERATIONS)).fetchall()
        now = time.monotonic()
        done: dict[str, int] = {}
        schedules_due = everything
        steps = [(op, queue) for op, queue, _ in rows if op is not None]
        self._maint_due = (bool(steps), next((w for op, _, w in rows if op is None), None))
        for op, queue in steps:
            if op == "schedules":
                schedules_due = True
                continue
            if not everything and op in ("rotate_step1", "prune"):
                key = (str(op), str(queue))
                if now - last.get(key, float("-inf")) < self.settings.rotate_interval:
                    continue
                last[key] = now
            result = await self._run_op(conn, op, queue)
            done[f"{op}:{queue}" if queue else op] = result
            if op == "rotate_step1" and result:
                self._emit(logging.INFO, "rotated", f"rotated the event tables of queue {queue}", queue=queue)
                done[f"rotate_step2:{queue}"] = await self._run_op(conn, "rotate_step2", queue)
        fired = await self._schedules(conn) if schedules_due else {}
        for outcome, n in fired.items():
            if n:
                done[f"schedule_{outcome}"] = n
        return done

    async def _schedules(self, conn: AConn) -> dict[str, int]:
        """The due sends of every schedule (pglogq.schedules.fire_due); a failure is logged and
        retried in the next pass."""
        try:
            fired = await schedules.fire_due(conn)
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable):
                self._emit(logging.WARNING, "maintenance_timeout",
                           f"schedules timed out (will retry): {_error_text(exc)}", op="schedules")
                return {}
            self.stats.errors += 1
            self._emit(logging.ERROR, "maintenance_step_failed", f"schedules failed: {_error_text(exc)}",
                       op="schedules", sqlstate=exc.sqlstate)
            return {}
        for outcome, n in fired.items():
            if n:
                self.stats.maintenance[f"schedule_{outcome}"] = self.stats.maintenance.get(f"schedule_{outcome}", 0) + n
        if fired["sent"] or fired["skipped"]:
            self._emit(logging.INFO, "schedules", f"schedules: {fired['sent']} sent, {fired['skipped']} skipped",
                       sent=fired["sent"], skipped=fired["skipped"])
        return fired

    async def _run_op(self, conn: AConn, op: str, queue: str | None) -> int:
        try:
            row = await (await conn.execute(q.MAINT_RUN, (op, queue))).fetchone()
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable):
                self._emit(logging.WARNING, "maintenance_timeout",
                           f"maintenance step {op} timed out (will retry): {_error_text(exc)}",
                           op=op, queue=queue)
                return 0
            if exc.sqlstate == "PQ001":  # the queue was dropped meanwhile
                return 0
            self.stats.errors += 1
            self._emit(logging.ERROR, "maintenance_step_failed", f"maintenance step {op} failed: {_error_text(exc)}",
                       op=op, queue=queue, sqlstate=exc.sqlstate)
            return 0
        self.stats.maintenance[op] = self.stats.maintenance.get(op, 0) + 1
        result = int(row[0]) if row and row[0] is not None else 0
        if result and op == "pump":
            self._emit(logging.DEBUG, "pumped", f"moved {result} due retries/delayed events", moved=result)
        return result

    # -- one pass (--once) ----------------------------------------------------------------

    async def once(self) -> int:
        """One pass: lock, restore check, every due maintenance step, one tick.

        Returns 0 (done, or another ticker is active), 1 (database error) or 3 (refused)."""
        s = self.settings
        conn: AConn | None = None
        try:
            conn = await self._connect("once")
            await self._require_direct(conn)
            await self._timeouts(conn, s.maint_statement_timeout, s.maint_lock_timeout)
            await self._schema_ready(conn)
            if not await self._try_lock(conn):
                self._emit(logging.INFO, "standby", "another ticker is active on this database; nothing to do",
                           holder=await self._holder(conn))
                return 0
            self._set_state(State.ACTIVE)
            await self._check(conn)
            done = await self.maintenance_pass(conn, {}, everything=True)
            row = await (await conn.execute(q.TICKER)).fetchone()
            ticks = int(row[0]) if row and row[0] is not None else 0
            self.stats.polls += 1
            self.stats.ticks += ticks
            self._emit(logging.INFO, "pass_done", "one pass done", ticks=ticks,
                       maintenance=",".join(f"{k}={v}" for k, v in done.items()))
            return 0
        except Refused as exc:
            self._set_state(State.REFUSED, str(exc))
            self._emit(logging.ERROR, "refused", f"refusing to tick this database: {exc}")
            return 3
        except SchemaMissing as exc:
            self._emit(logging.ERROR, "schema_missing", str(exc))
            return 1
        except psycopg.Error as exc:
            if exc.sqlstate == "PQ015":
                self._emit(logging.ERROR, "refused", f"refusing to tick this database: {_error_text(exc)}")
                return 3
            self._emit(logging.ERROR, "pass_failed", f"pass failed: {_error_text(exc)}", sqlstate=exc.sqlstate)
            return 1
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            self._set_state(State.STOPPED)
