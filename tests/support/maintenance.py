"""Driving maintenance from a test: pump and tick, rotate every table of a queue."""

from __future__ import annotations

from typing import Any

import pglogq
from tests.support.db import current_table
from tests.support.draining import drain


def pump_and_tick(client: Any, queue: str) -> None:
    """One round of the maintenance loop: pump due retries/delays, then tick the queue."""
    client.maintain()
    client.tick(queue, force=True)


def rotate_all(client: Any, dsn: str, queue: str, consumers: list[str], times: int = 3) -> list[pglogq.Message]:
    """Rotate the queue's tables ``times`` times (3: every table has been truncated once),
    ticking and draining every consumer first so rotation is allowed.  Returns what the
    drains delivered (callers assert on it)."""
    delivered: list[pglogq.Message] = []
    for _ in range(times):
        before = current_table(dsn, queue)
        for _attempt in range(20):
            client.tick(queue, force=True)
            for c in consumers:
                delivered.extend(drain(client, queue, c))
            if client.rotate(queue):
                break
        else:
            raise AssertionError("rotation never became possible")
        assert current_table(dsn, queue) != before
    return delivered
