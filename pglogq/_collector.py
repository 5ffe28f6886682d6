"""The cyclic garbage collector held off while a received page is built and handled.

A page of up to 10,000 events becomes, in a few milliseconds, tens of thousands of new objects
(the rows psycopg loads, then one message per row) that all live until the page is
acknowledged.  CPython's collector runs every 700 new container objects: during a page it ran
dozens of times, scanned those objects each time, found nothing to free (they are all in use)
and promoted them to older generations, which woke a full collection of the whole heap about
once per page.  Measured on drains of 200,000 events by the Consumer with a no-op handler
(2-core machine, Python 3.11, ``python -m tests.harness.measure.consumer_ab``, client CPU per
event): in one run 4.49 us with the collector running throughout, 4.07 us with it held off while
each page is loaded and built, 3.80 us with it held off until the page is acknowledged (its
messages are then freed by reference counting and the count of new objects falls back: no
collection ran during the drain, against 707 young, 64 middle and 6 full ones before); in the
run of the final code 4.33 -> 3.64 us.

:func:`held_off` is that pause.  It is shared by the threads of the process (the collector is
one per process) and reentrant: it turns the collector off only if it was on, and back on when
the last holder leaves, or once ``limit`` seconds have passed (a thread of this module looks
every ``LIMIT`` seconds while holds come and go, so within ``limit + LIMIT``), so that a slow
handler's own garbage cycles wait that long at most.
Nothing is freed later than it would be by reference counting; only the search for reference
cycles waits.  A program that turns the collector off itself while a page is held finds it on
again after the page: turn it off before the consumer starts (pglogq then never touches it), or
not at all.
"""

from __future__ import annotations

import gc
import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

LIMIT = 0.25
"""How long a page holds the collector off at most (s): pages are sized for 0.1 s of handler
calls (``PAGE_SECONDS`` of the consumer)."""

_cond = threading.Condition()
_holders = 0
_off = False  # the collector is off because of held_off (then held_off turns it on again)
_deadline = math.inf  # when the watch turns it on at the latest (time.monotonic)
_watch: threading.Thread | None = None
_idle = False  # the watch waits for a notify (no hold for a while); else it looks every LIMIT s
_IDLE_AFTER = 10.0  # seconds without a hold after which the watch stops looking


@contextmanager
def held_off(limit: float = LIMIT) -> Iterator[None]:
    """No cyclic garbage collection inside the block, for ``limit`` seconds (``LIMIT``: a page's)."""
    global _holders, _off, _deadline, _watch
    with _cond:
        _holders += 1
        if _holders == 1 and gc.isenabled():
            gc.disable()
            _off = True
            _deadline = time.monotonic() + limit
            if _watch is None:
                _watch = threading.Thread(target=_watching, name="pglogq-collector", daemon=True)
                _watch.start()
            elif _idle:
                _cond.notify()  # else it looks on its own within LIMIT: no wake-up per page
    try:
        yield
    finally:
        with _cond:
            _holders -= 1
            if _holders == 0:
                _resume()


def _resume() -> None:
    global _off
    if _off:
        _off = False
        gc.enable()


def _watching() -> None:
    """Turn the collector on again once a hold outlives its limit (within another LIMIT).

    It looks every LIMIT seconds while holds come and go (a consumer's pages), so that a hold
    costs no thread wake-up; after ``_IDLE_AFTER`` seconds without a hold it waits to be told."""
    global _idle
    quiet_since = time.monotonic()
    with _cond:
        while True:
            now = time.monotonic()
            if _off:
                quiet_since = now
                if now >= _deadline:
                    _resume()
            elif now - quiet_since >= _IDLE_AFTER:
                _idle = True
                _cond.wait()
                _idle = False
                quiet_since = time.monotonic()
                continue
            _cond.wait(LIMIT)


def _after_fork() -> None:
    # a child has no watch thread and none of the parent's holders
    global _cond, _holders, _watch, _idle
    _cond = threading.Condition()
    _holders = 0
    _watch = None
    _idle = False
    _resume()


os.register_at_fork(after_in_child=_after_fork)
