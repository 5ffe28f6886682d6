"""Retry policies: how long a failed message waits before it comes back.

A policy only computes the ``retry_after`` a consumer passes to ``nack``; how many times a
message is retried before it is dead-lettered is the queue's ``max_retries`` setting, enforced
by the server.

>>> from datetime import timedelta
>>> RetryPolicy.fixed(timedelta(seconds=10)).delay(3)
datetime.timedelta(seconds=10)
>>> p = RetryPolicy.exponential(timedelta(seconds=1), cap=timedelta(minutes=1), jitter=False)
>>> [p.delay(n).total_seconds() for n in range(8)]
[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import timedelta

__all__ = ["RetryPolicy"]

_MAX_DELAY = timedelta(days=365)
"""nack refuses a longer retry_after."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait before the ``retry_count``-th redelivery of a failed message.

    Build one with :meth:`fixed` or :meth:`exponential`, then call :meth:`delay` with the failed
    message's ``retry_count`` (0 on its first failure)::

        policy = RetryPolicy.exponential(timedelta(seconds=1), cap=timedelta(minutes=5))
        batch.nack(msg, retry_after=policy.delay(msg.retry_count), reason=str(exc))

    Exponential delays are ``base * factor ** retry_count``, at most ``cap``.  With ``jitter``
    each delay is drawn uniformly from ``[d / 2, d]`` (``d`` the exponential delay), so consumers
    that failed together do not all come back at the same instant.
    """

    base: timedelta
    factor: float = 1.0
    cap: timedelta = _MAX_DELAY
    jitter: bool = False

    def __post_init__(self) -> None:
        if self.base < timedelta(0):
            raise ValueError(f"base must not be negative, got {self.base}")
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise ValueError(f"factor must be a finite number >= 1, got {self.factor}")
        if self.cap < self.base:
            raise ValueError(f"cap ({self.cap}) must not be less than base ({self.base})")
        if self.cap > _MAX_DELAY:
            raise ValueError(f"cap must be at most {_MAX_DELAY.days} days (the longest retry_after nack takes)")

    @classmethod
    def fixed(cls, delay: timedelta) -> RetryPolicy:
        """The same ``delay`` before every retry."""
        return cls(base=delay, cap=max(delay, timedelta(0)))

    @classmethod
    def exponential(
        cls,
        base: timedelta,
        factor: float = 2.0,
        cap: timedelta = timedelta(minutes=15),
        jitter: bool = True,
    ) -> RetryPolicy:
        """``base``, then ``base * factor``, ``base * factor**2`` ... up to ``cap``; jittered by default."""
        return cls(base=base, factor=factor, cap=cap, jitter=jitter)

    def delay(self, retry_count: int) -> timedelta:
        """The ``retry_after`` for a message that has been redelivered ``retry_count`` times."""
        if retry_count < 0:
            raise ValueError(f"retry_count must be >= 0, got {retry_count}")
        base = self.base.total_seconds()
        cap = self.cap.total_seconds()
        if self.factor == 1.0 or base == 0.0:
            seconds = base
        elif retry_count * math.log(self.factor) >= math.log(cap / base):
            seconds = cap
        else:
            seconds = min(cap, base * self.factor**retry_count)
        if self.jitter:
            seconds = random.uniform(seconds / 2, seconds)
        return timedelta(seconds=seconds)
