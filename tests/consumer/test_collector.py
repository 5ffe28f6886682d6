"""The cyclic garbage collector held off while a page is built and handled (pglogq._collector).

The hold is a performance measure (see the module); what these tests pin down is that it never
changes the program's own choice and never outlasts its page or its limit: the collector is on
again after every page (also one whose handler failed), after a hold that ran past its limit,
in a forked child, and is never turned on when the program had turned it off.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator

import pytest

import pglogq
from pglogq import _collector
from tests.support.consumers import MODES, Spec, run_once


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_held_off_turns_the_collector_off_and_on_again() -> None:
    with _collector.held_off(10):
        assert not gc.isenabled()
        with _collector.held_off(10):  # reentrant: the inner end does not turn it on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), _collector.held_off(10):
        _ = 1 / 0
    assert gc.isenabled()


def test_a_collector_the_program_turned_off_stays_off() -> None:
    gc.disable()
    with _collector.held_off(0.01):
        time.sleep(0.1)  # past the limit: the watch must not turn on what it did not turn off
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_hold_past_its_limit_turns_the_collector_on() -> None:
    with _collector.held_off(0.05):
        deadline = time.monotonic() + 5
        while not gc.isenabled() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc.isenabled()
        with _collector.held_off(10):  # another holder while the expired one holds: stays on
            assert gc.isenabled()
    assert gc.isenabled()
    with _collector.held_off(10):  # the next hold holds again
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_hold_after_a_quiet_spell_wakes_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without holds for a while the watch waits to be told: the next hold tells it, and its
    limit still holds."""
    monkeypatch.setattr(_collector, "_IDLE_AFTER", 0.05)
    with _collector.held_off(10):  # the watch exists and is looking
        pass
    deadline = time.monotonic() + 5
    while not _collector._idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _collector._idle
    with _collector.held_off(0.05):
        while not gc.isenabled() and time.monotonic() < deadline + 5:
            time.sleep(0.01)
        assert gc.isenabled()


def test_holders_in_two_threads_end_with_the_last() -> None:
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with _collector.held_off(10):
            entered.set()
            release.wait(5)

    t = threading.Thread(target=other)
    with _collector.held_off(10):
        t.start()
        assert entered.wait(5)
    assert not gc.isenabled()  # the other thread still holds
    release.set()
    t.join(5)
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_hold_has_its_collector_on() -> None:
    with _collector.held_off(10):
        pid = os.fork()
        if pid == 0:  # the child: the parent's holders are not its own
            os._exit(0 if gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _queue(client: pglogq.Client, events: int) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    for start in range(0, events, 1000):
        client.send_batch("q", [{"n": i} for i in range(start, min(events, start + 1000))])
    client.tick("q", force=True)


@pytest.mark.parametrize("mode", MODES)
def test_handlers_run_held_and_the_collector_is_on_after_the_run(
    mode: str, client: pglogq.Client, dsn: str
) -> None:
    """A quick page is handled with the collector off; a handler that fails, and one that runs
    past the limit, end with it on (the next calls of a page past the limit see it on)."""
    _queue(client, 1000)  # pages of 100, then 400 (100..499), then the rest
    seen: list[tuple[int, bool]] = []
    spec = Spec(dsn, "q", "c")

    @spec.handler()
    def handle(msg: pglogq.Delivery) -> None:
        seen.append((msg.payload["n"], gc.isenabled()))
        if msg.payload["n"] == 150:
            # past the limit and the watch's next look (it looks every LIMIT seconds)
            time.sleep(2 * _collector.LIMIT + 0.3)
        if msg.payload["n"] == 250:
            raise RuntimeError("failed")

    stats = run_once(mode, spec, stop_when_idle=True)
    assert gc.isenabled()
    assert stats.handled + stats.retried >= 1000
    on = dict(seen)
    assert on[0] is False and on[149] is False  # the first page (100) and the next, held
    assert on[151] is True  # the page that ran past the limit, after its limit
    assert on[999] is False  # a page after it is held again


@pytest.mark.parametrize("mode", MODES)
def test_a_consumer_never_turns_on_a_collector_the_program_turned_off(
    mode: str, client: pglogq.Client, dsn: str
) -> None:
    _queue(client, 300)
    seen: list[bool] = []
    spec = Spec(dsn, "q", "c")
    spec.handler()(lambda msg: seen.append(gc.isenabled()))
    gc.disable()
    run_once(mode, spec, stop_when_idle=True)
    assert not gc.isenabled() and not any(seen) and len(seen) == 300
