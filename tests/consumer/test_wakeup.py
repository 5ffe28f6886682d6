"""Wake-ups: a consumer notices when tick notifications never arrive and says so once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import pglogq
from tests.support.consumers import MODES, Spec, running


@pytest.mark.parametrize("mode", MODES)
def test_missing_notifications_are_detected_and_logged_once(
    mode: str, client: pglogq.Client, dsn: str, new_db: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    # the listener LISTENs in another database, like behind a transaction-mode pooler:
    # no notification ever arrives, events are found by polling only
    elsewhere = new_db()

    def deaf(consumer: Any) -> None:
        if mode == "thread":
            consumer._conninfo = lambda: elsewhere
        else:

            async def conninfo() -> str:
                return elsewhere

            consumer._conninfo = conninfo

    handled = threading.Semaphore(0)
    spec = Spec(dsn, "q", "c", kwargs={"poll_interval": 0.1, "notify_miss_limit": 3}, post_build=deaf)
    spec.handler()(lambda msg: handled.release())
    caplog.set_level(logging.WARNING, logger="pglogq.consumer")
    with running(mode, spec) as r:
        for _ in range(6):
            time.sleep(0.3)  # let the consumer go back to waiting: the event is then found by a poll
            client.send("q", {})
            client.tick("q", force=True)
            assert handled.acquire(timeout=30)
        r.stop()
        stats = r.join()
    assert stats.handled == 6
    warnings = [rec for rec in caplog.records if "no tick notification arrived" in rec.getMessage()]
    assert len(warnings) == 1
    assert r.consumer.health.notifications == 0
    assert r.consumer.wakeup.reconnects >= 1
