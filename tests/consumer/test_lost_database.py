"""A running consumer whose database goes away: it keeps trying, waiting longer after each
failure in a row (``poll_interval`` doubling up to the loop's ``backoff_max``), logs each failure
with its reason, and goes on once the database is back.

The database is a server of the test's own (``tests/support/servers.py``), stopped and started
again by the test: never the shared one."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pglogq
from pglogq import _consumer_loop, _consumer_loop_async
from tests.support.consumers import MODES, Spec, running
from tests.support.servers import ExtraServer, servers
from tests.support.waiting import wait_for

WAIT = re.compile(r"database error \((.*)\); trying again in ([0-9.]+) s")


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtraServer]:
    with servers(1, pin=False, base=Path(tmp_path_factory.mktemp("lost-db"))) as made:
        yield made[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_a_consumer_that_loses_its_database_backs_off_and_says_why(
    mode: str, share: bool, own_server: ExtraServer, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop_module: Any = _consumer_loop if mode == "thread" else _consumer_loop_async
    monkeypatch.setattr(loop_module.ReceiveLoop, "backoff_max", 0.4, raising=False)  # a short test
    queue = f"lost_{mode}_{share}"
    with pglogq.Client(own_server.dsn) as client:
        client.create_queue(queue)
        client.subscribe(queue, "c", share=share)
        first = client.send(queue, {"n": 1})
        client.tick(queue, force=True)
    handled: list[int] = []
    lock = threading.Lock()

    def short_pool_wait(c: Any) -> None:
        c.client._pool_timeout = 2.0  # how long a call waits for a connection (as a sharded client sets it)

    spec = Spec(own_server.dsn, queue, "c", kwargs={"poll_interval": 0.1, "worker": "w"}, post_build=short_pool_wait)

    @spec.handler()
    def handle(msg: Any) -> None:
        with lock:
            handled.append(msg.msg_id)

    caplog.set_level(logging.INFO, logger="pglogq.consumer")
    with running(mode, spec) as r:
        wait_for(lambda: first in handled, "the first event handled", timeout=60)
        # stopped once the ack has committed: a stop between the handler and its ack hands the
        # event out again, as it must (at least once), and this test is not about that
        with pglogq.Client(own_server.dsn) as client:
            wait_for(lambda: [s.state for s in client.lookup(queue, first)] == ["done"],
                     "the first event acknowledged", timeout=60)
        own_server.stop()
        try:
            failures = wait_for(lambda: [m for m in (WAIT.search(x.getMessage()) for x in caplog.records) if m]
                                if len([x for x in caplog.records if WAIT.search(x.getMessage())]) >= 5 else None,
                                "five failed attempts logged", timeout=120)
        finally:
            own_server.start()
        waits = [float(m.group(2)) for m in failures[:5]]
        assert waits == [0.1, 0.2, 0.4, 0.4, 0.4], waits  # doubling from poll_interval, capped
        reasons = " ".join(m.group(1) for m in failures)
        assert "cannot connect to the database" in reasons and "refused" in reasons.lower(), reasons
        # the database is back: the consumer goes on by itself, and says so
        with pglogq.Client(own_server.dsn) as client:
            second = client.send(queue, {"n": 2})
            client.tick(queue, force=True)
        wait_for(lambda: second in handled, "the event sent after the database came back handled", timeout=120)
        assert any("reachable again" in x.getMessage() for x in caplog.records)
        r.stop()
        stats = r.join()
    assert stats.errors >= 5
    assert sorted(handled) == [first, second]
