"""What genuinely differs between the asyncio and the thread consumer: the asyncio side.

``pglogq/_concurrency.py`` holds the same names for threads.  ``consumer_async.py`` uses only these, so
the generated ``consumer.py`` works unchanged with ``_concurrency``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

from pglogq._runtime import ABANDONED_OUTCOME, ERROR, OK_OUTCOME, TIMEOUT, Outcome, settled

CAN_CANCEL = True
"""A running handler can be interrupted (its task is cancelled at the timeout)."""

Result = Awaitable[Any]
"""What a handler returns: an awaitable here, anything for threads."""


class Calls(Protocol):
    """A page's handler calls for :meth:`Runner.run`: ``calls(i)`` makes call ``i`` (no closure
    per call: a page's worth of them is work for the allocator and the garbage collector)."""

    def __len__(self) -> int: ...

    def __call__(self, i: int) -> Awaitable[None]: ...


Event = asyncio.Event

Lock = asyncio.Lock
"""Guards a page's start frontier between the handler side and the heartbeat side."""


def current_loop() -> object | None:
    """The event loop a client's pool is bound to (threads: None, one pool serves them all)."""
    return asyncio.get_running_loop()


def same_loop(loop: object | None) -> bool:
    """True when ``loop`` (from :func:`current_loop`) is the running one, or when none is bound yet."""
    return loop is None or loop is asyncio.get_running_loop()


def loop_running_elsewhere(loop: object | None) -> bool:
    """True when ``loop`` still runs (in another thread): its pool must not be taken from it."""
    return isinstance(loop, asyncio.AbstractEventLoop) and loop.is_running() and not loop.is_closed()


def discard_pool(pool: Any) -> None:
    """Close the idle connections of a pool whose event loop is gone, without that loop.

    ``pool.close()`` would need the loop its tasks and locks belong to (asyncio.run closed it:
    "Event loop is closed"); the connections it holds are closed here directly (psycopg_pool keeps
    idle connections in ``_pool``), and the pool is marked closed so that nothing reuses it."""
    pool._closed = True
    idle = list(getattr(pool, "_pool", ()))
    with contextlib.suppress(AttributeError):
        pool._pool.clear()
    for conn in idle:
        with contextlib.suppress(Exception):
            conn.pgconn.finish()


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (None: until it is set); True if
    it is set."""
    if event.is_set():
        return True
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
    return event.is_set()


async def wait_readable(conn: Any, events: Sequence[asyncio.Event], timeout: float) -> bool:
    """Wait until ``conn``'s socket has something to read (True), one of ``events`` is set or
    ``timeout`` seconds pass (False).  The caller reads what came (``conn.notifies(timeout=0)``), and
    looks before it waits: a notification read with a statement's result sits in the
    connection, not on the socket.  Nobody may close ``conn`` meanwhile (set an event instead):
    its descriptor, reused by another connection, would keep this reader.

    Not ``conn.notifies(timeout=...)``: psycopg's wait wakes every 0.1 s to look for interrupts,
    ten wake-ups a second for every idle consumer."""
    if any(e.is_set() for e in events):
        return False
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    fd = conn.fileno()
    loop.add_reader(fd, ready)
    waits: list[asyncio.Future[Any]] = [readable, *(asyncio.ensure_future(e.wait()) for e in events)]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_reader(fd)
        for w in waits:
            w.cancel()
    return readable.done() and not readable.cancelled()


def check_handler(fn: Callable[..., Any]) -> None:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"AsyncConsumer handlers must be coroutine functions (async def): {fn!r}")


class Background:
    """A function running beside the consumer loop (the heartbeat): a task here."""

    def __init__(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._task: asyncio.Task[None] = asyncio.get_running_loop().create_task(fn(), name=name)

    async def join(self) -> None:
        await self._task


async def gather(fns: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run ``fns`` at once (a task each: a consumer's receive loops) and wait until every one has
    returned; their results in order, or the first exception raised once all have ended."""
    results = await asyncio.gather(*(fn() for fn in fns), return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return list(results)


async def _one(calls: Calls, i: int, timeout: float | None) -> Outcome:
    task = asyncio.ensure_future(calls(i))
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task})  # let it unwind; how it reacts does not matter
        return (TIMEOUT, None)
    exc = task.exception()
    return OK_OUTCOME if exc is None else (ERROR, exc)


async def close_busy(conn: Any) -> None:
    """Close a connection a handler that could not be stopped may still use (see the thread side)."""
    with contextlib.suppress(Exception):
        await conn.cancel_safe(timeout=5.0)
    async with conn.lock:
        await conn.close()


class Runner:
    """Runs a page's handler calls, at most ``concurrency`` at a time, each within ``timeout``.

    Returns one outcome per call, in order.  When ``abandon`` is set, calls not yet started are
    skipped and running ones are cancelled (outcome ABANDONED) and ``run`` returns as soon as they
    have unwound (a cancelled psycopg statement is cancelled in the server too)."""

    def __init__(self, concurrency: int, timeout: float | None) -> None:
        self.concurrency = concurrency
        self.timeout = timeout
        self.left_behind = False
        """Always False here: a cancelled task is waited for (the thread side may leave one)."""

    def close(self) -> None:
        """Nothing to release here (the thread side stops its handler thread)."""

    async def run(self, calls: Calls, abandon: asyncio.Event) -> list[Outcome]:
        n = len(calls)
        out: list[Outcome | None] = [None] * n
        if abandon.is_set():
            return [ABANDONED_OUTCOME] * n
        if self.concurrency == 1 and self.timeout is None:

            async def sequential() -> None:
                yielded = time.monotonic()
                for i in range(n):
                    if abandon.is_set():
                        return
                    try:
                        await calls(i)
                        out[i] = OK_OUTCOME
                    except Exception as exc:
                        out[i] = (ERROR, exc)
                    now = time.monotonic()
                    if now - yielded >= 0.005:  # let stop() and signal handlers run at least every 5 ms
                        await asyncio.sleep(0)
                        yielded = now

            # one task for the page, raced against abandon: stop(abandon=True) cancels the handler
            await _race([asyncio.ensure_future(sequential())], abandon)
            return settled(out)
        sem = asyncio.Semaphore(self.concurrency)

        async def slot(i: int) -> None:
            async with sem:
                if abandon.is_set():
                    out[i] = ABANDONED_OUTCOME
                    return
                out[i] = await _one(calls, i, self.timeout)

        tasks = [asyncio.ensure_future(slot(i)) for i in range(n)]
        await _race(tasks, abandon)
        return [o if o is not None else ABANDONED_OUTCOME for o in out]


async def _race(tasks: Sequence[asyncio.Future[None]], abandon: asyncio.Event) -> None:
    """Wait for ``tasks``; when ``abandon`` is set first, cancel them and wait until they unwound."""
    watcher: asyncio.Future[Any] = asyncio.ensure_future(abandon.wait())
    everything: asyncio.Future[Any] = asyncio.gather(*tasks)
    try:
        await asyncio.wait([everything, watcher], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        everything.cancel()
        raise
    finally:
        watcher.cancel()
    if not everything.done():
        everything.cancel()  # cancels every task; done once they have all unwound
        await asyncio.wait([everything])
        with contextlib.suppress(asyncio.CancelledError):
            everything.exception()  # retrieved: the cancellation is the expected outcome
    else:
        everything.result()
