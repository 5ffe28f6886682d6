"""Offered load: call ``send`` so that ``rate`` events per second leave, whatever it costs.

One clock for latency: every time stamp that is paired with another one (a producer's send,
a consumer's handler start) is read with :func:`clock`, ``CLOCK_MONOTONIC``.  On Linux that clock
is one counter for the whole machine, shared by every process (it is not per process, and NTP
cannot step it), so a stamp taken in a producer process and one taken in the consumer's process
are on the same time line.  Wall-clock ``time.time()`` is used only to schedule (start/stop at).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def clock() -> float:
    """Seconds on the machine-wide monotonic clock (CLOCK_MONOTONIC): the only clock that latency
    stamps are read with, in every process."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def wait_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def paced(
    rate: float,
    seconds: float,
    send: Callable[[list[int]], Sequence[float] | None],
    *,
    start_at: float | None = None,
    max_chunk: int = 1000,
) -> list[tuple[int, float]]:
    """Send sequence numbers 0 .. int(rate * seconds) - 1 at ``rate`` per second.

    Events that are due together (the sender fell behind, or the rate is above what one call per
    millisecond can carry) go in one ``send`` call.  Returns (seq, send time) pairs on
    :func:`clock`: the time the ``send`` call carrying the event started -- the earliest moment a
    consumer could see it, so that a latency measured from it cannot be negative.  A ``send`` that
    hands its events over one at a time (one publish and confirm each) returns each event's own
    start time instead (one per seq, in order).
    """
    out: list[tuple[int, float]] = []
    t0 = start_at if start_at is not None else time.time()
    wait_until(t0)
    seq = 0
    total = int(rate * seconds)
    while seq < total:
        now = time.time()
        due = min(int(rate * (now - t0)) + 1, total) - seq
        if due <= 0:
            time.sleep(max(0.0, t0 + seq / rate - now))
            continue
        k = min(due, max_chunk)
        seqs = list(range(seq, seq + k))
        ts = clock()
        each = send(seqs)
        if each is not None:
            if len(each) != k:
                raise ValueError(f"send returned {len(each)} times for {k} events")
            out.extend(zip(seqs, each, strict=True))
        else:
            out.extend((s, ts) for s in seqs)
        seq += k
    return out
