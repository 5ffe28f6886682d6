"""What genuinely differs between the asyncio and the thread consumer: the thread side.

Same names as ``pglogq/_concurrency_async.py``; the generated ``consumer.py`` imports this module.
"""

from __future__ import annotations

import contextlib
import inspect
import queue
import selectors
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pglogq._runtime import ABANDONED_OUTCOME, ERROR, OK_OUTCOME, TIMEOUT, Outcome, settled

CAN_CANCEL = False
"""A thread cannot be interrupted: at the timeout its result is dropped, the thread runs on."""

Result = Any
"""What a handler returns: anything here, an awaitable for asyncio."""


class Calls(Protocol):
    """A page's handler calls for :meth:`Runner.run`: ``calls(i)`` makes call ``i`` (no closure
    per call: a page's worth of them is work for the allocator and the garbage collector)."""

    def __len__(self) -> int: ...

    def __call__(self, i: int) -> None: ...


Event = threading.Event

Lock = threading.Lock
"""Guards a page's start frontier between the handler side and the heartbeat side."""


def current_loop() -> object | None:
    """No event loop: one pool serves every thread."""
    return None


def same_loop(loop: object | None) -> bool:
    return True


def loop_running_elsewhere(loop: object | None) -> bool:
    return False


def discard_pool(pool: Any) -> None:
    pool.close()


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (None: until it is set); True if
    it is set."""
    return event.wait(timeout)


STOP_LOOK = 0.25
"""How often a thread waiting on a socket looks at its stop event (a thread cannot wait on both)."""


def wait_readable(conn: Any, events: Sequence[threading.Event], timeout: float) -> bool:
    """Wait until ``conn``'s socket has something to read (True), one of ``events`` is set or
    ``timeout`` seconds pass (False).  The caller reads what came (``conn.notifies(timeout=0)``), and
    looks before it waits: a notification read with a statement's result sits in the
    connection, not on the socket.  Nobody may close ``conn`` meanwhile (set an event instead).

    Not ``conn.notifies(timeout=...)``: psycopg's wait wakes every 0.1 s to look for interrupts
    (and polls the socket a few dozen times as it ends), for every idle consumer; this wakes
    every ``STOP_LOOK`` seconds.  A selector, not ``select.select``, which refuses descriptors
    from 1024 on."""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(conn.fileno(), selectors.EVENT_READ)
        while not any(e.is_set() for e in events):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if selector.select(min(left, STOP_LOOK)):
                return True
    return False


def check_handler(fn: Callable[..., Any]) -> None:
    if inspect.iscoroutinefunction(fn):
        raise TypeError(f"Consumer handlers must be plain functions (use AsyncConsumer for async def): {fn!r}")


class Background:
    """A function running beside the consumer loop (the heartbeat): a daemon thread here."""

    def __init__(self, fn: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=fn, name=name, daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()


def gather(fns: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run ``fns`` at once (a thread each: a consumer's receive loops) and wait until every one has
    returned; their results in order, or the first exception raised once all have ended."""
    results: list[Any] = [None] * len(fns)
    failures: list[BaseException | None] = [None] * len(fns)

    def call(i: int) -> None:
        try:
            results[i] = fns[i]()
        except BaseException as exc:
            failures[i] = exc

    threads = [threading.Thread(target=call, args=(i,), name=f"pglogq-loop-{i}", daemon=True)
               for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for exc in failures:
        if exc is not None:
            raise exc
    return results


def close_busy(conn: Any) -> None:
    """Close a connection that a left-behind handler thread may still use.

    Its running statement is cancelled first; the connection is closed while holding its lock (a
    statement holds the lock while it runs), so the handler's next statement fails with "the
    connection is closed" instead of writing anything; the pool discards a closed connection."""
    with contextlib.suppress(Exception):
        conn.cancel_safe(timeout=5.0)
    with conn.lock:
        conn.close()


_STOP = None


def _serve(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        job()
        del job  # the page's calls (and their messages) are freed now, not at the next page


class Runner:
    """Runs a page's handler calls, at most ``concurrency`` at a time, each within ``timeout``.

    With one call at a time and no timeout the calls run one after the other in one handler
    thread that lives as long as ``run`` (the consumer's) does; otherwise each runs in a daemon
    thread.  A call past its timeout gets outcome TIMEOUT and frees its slot; its thread cannot be
    stopped and runs on, its result ignored.  When ``abandon`` is set, calls not yet started are
    skipped and running ones are left behind (outcome ABANDONED, ``left_behind`` True): ``run``
    returns at once, the thread finishes its call unobserved."""

    def __init__(self, concurrency: int, timeout: float | None) -> None:
        self.concurrency = concurrency
        self.timeout = timeout
        self.left_behind = False
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] | None = None

    def close(self) -> None:
        """Let the handler thread end (after its current call, if one was left behind)."""
        jobs, self._jobs = self._jobs, None
        if jobs is not None:
            jobs.put(_STOP)

    def _submit(self, job: Callable[[], None]) -> None:
        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(self._jobs,), name="pglogq-handler", daemon=True).start()
        self._jobs.put(job)

    def run(self, calls: Calls, abandon: threading.Event) -> list[Outcome]:
        n = len(calls)
        out: list[Outcome | None] = [None] * n
        self.left_behind = False
        if abandon.is_set():
            return [ABANDONED_OUTCOME] * n
        if self.concurrency == 1 and self.timeout is None:
            done = threading.Event()

            def sequential() -> None:
                # no lock per call: once abandoned, run() returns a copy of ``out`` and this loop
                # stops before its next call (``abandon`` is never cleared)
                try:
                    for i in range(n):
                        if abandon.is_set():
                            return
                        try:
                            calls(i)
                            out[i] = OK_OUTCOME
                        except Exception as exc:
                            out[i] = (ERROR, exc)
                finally:
                    done.set()

            self._submit(sequential)
            while not done.wait(0.05):
                if abandon.is_set():
                    gone = not done.is_set()  # first: a call finishing now counts as left behind
                    result = list(out)
                    if gone:
                        self.left_behind = True
                        self.close()  # the next page gets a fresh handler thread
                    return [o if o is not None else ABANDONED_OUTCOME for o in result]
            return settled(out)

        cond = threading.Condition()
        free = self.concurrency
        deadlines: dict[int, float] = {}

        def work(i: int) -> None:
            nonlocal free
            try:
                calls(i)
                res: Outcome = OK_OUTCOME
            except Exception as exc:
                res = (ERROR, exc)
            with cond:
                if out[i] is None:
                    out[i] = res
                    free += 1
                    deadlines.pop(i, None)
                cond.notify_all()

        started = 0
        with cond:
            while True:
                if abandon.is_set():
                    self.left_behind = bool(deadlines)
                    break
                while free > 0 and started < n:
                    i = started
                    started += 1
                    free -= 1
                    deadlines[i] = time.monotonic() + self.timeout if self.timeout is not None else float("inf")
                    threading.Thread(target=work, args=(i,), name="pglogq-handler", daemon=True).start()
                now = time.monotonic()
                for i, deadline in list(deadlines.items()):
                    if now >= deadline:
                        out[i] = (TIMEOUT, None)
                        free += 1
                        del deadlines[i]
                if started >= n and not deadlines:
                    break
                if free > 0 and started < n:
                    continue
                nearest = min(deadlines.values(), default=now + 0.1)
                cond.wait(max(0.0, min(nearest - now, 0.1)))
        return [o if o is not None else ABANDONED_OUTCOME for o in out]
