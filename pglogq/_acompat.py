"""What genuinely differs between the asyncio and the thread consumer: the asyncio side.

``pglogq/_compat.py`` holds the same names for threads.  ``_aconsumer.py`` uses only these, so
the generated ``_consumer.py`` works unchanged with ``_compat``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from pglogq._runtime import ABANDONED, ERROR, OK, TIMEOUT, Outcome

CAN_CANCEL = True
"""A running handler can be interrupted (its task is cancelled at the timeout)."""

Result = Awaitable[Any]
"""What a handler returns: an awaitable here, anything for threads."""

Thunk = Callable[[], Awaitable[None]]

Event = asyncio.Event


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; True if it is set."""
    if event.is_set():
        return True
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
    return event.is_set()


def check_handler(fn: Callable[..., Any]) -> None:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"AsyncConsumer handlers must be coroutine functions (async def): {fn!r}")


class Background:
    """A function running beside the consumer loop (the heartbeat): a task here."""

    def __init__(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._task: asyncio.Task[None] = asyncio.get_running_loop().create_task(fn(), name=name)

    async def join(self) -> None:
        await self._task


async def _one(thunk: Thunk, timeout: float | None) -> Outcome:
    task = asyncio.ensure_future(thunk())
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
    return (OK, None) if exc is None else (ERROR, exc)


class Runner:
    """Runs a page's handler calls, at most ``concurrency`` at a time, each within ``timeout``.

    Returns one outcome per call, in order.  When ``abandon`` is set, calls not yet started are
    skipped and running ones are cancelled (outcome ABANDONED)."""

    def __init__(self, concurrency: int, timeout: float | None) -> None:
        self.concurrency = concurrency
        self.timeout = timeout

    async def run(self, thunks: Sequence[Thunk], abandon: asyncio.Event) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(thunks)
        if self.concurrency == 1 and self.timeout is None:
            yielded = time.monotonic()
            for i, thunk in enumerate(thunks):
                if abandon.is_set():
                    out[i] = (ABANDONED, None)
                    continue
                try:
                    await thunk()
                    out[i] = (OK, None)
                except Exception as exc:
                    out[i] = (ERROR, exc)
                now = time.monotonic()
                if now - yielded >= 0.005:  # let stop() and signal handlers run at least every 5 ms
                    await asyncio.sleep(0)
                    yielded = now
            return [o if o is not None else (ABANDONED, None) for o in out]
        sem = asyncio.Semaphore(self.concurrency)

        async def slot(i: int, thunk: Thunk) -> None:
            async with sem:
                if abandon.is_set():
                    out[i] = (ABANDONED, None)
                    return
                out[i] = await _one(thunk, self.timeout)

        tasks = [asyncio.ensure_future(slot(i, t)) for i, t in enumerate(thunks)]
        watcher: asyncio.Future[Any] = asyncio.ensure_future(abandon.wait())
        try:
            everything: asyncio.Future[Any] = asyncio.gather(*tasks)
            await asyncio.wait([everything, watcher], return_when=asyncio.FIRST_COMPLETED)
            if not everything.done():
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            else:
                everything.result()
        finally:
            watcher.cancel()
        return [o if o is not None else (ABANDONED, None) for o in out]
