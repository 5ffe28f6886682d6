"""Offered load: call ``send`` so that ``rate`` events per second leave, whatever it costs."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def paced(
    rate: float,
    seconds: float,
    send: Callable[[list[int]], None],
    *,
    start_at: float | None = None,
    max_chunk: int = 1000,
) -> list[tuple[int, float]]:
    """Send sequence numbers 0 .. int(rate * seconds) - 1 at ``rate`` per second.

    Events that are due together (the sender fell behind, or the rate is above what one call per
    millisecond can carry) go in one ``send`` call.  Returns (seq, commit time) pairs: the time
    right after ``send`` returned, that is after the commit.
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
        send(seqs)
        ts = time.time()
        out.extend((s, ts) for s in seqs)
        seq += k
    return out
