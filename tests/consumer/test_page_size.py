"""The consumer's page size: adaptive by default (``max_messages=None``), fixed when given."""

from __future__ import annotations

import time
from itertools import pairwise
from typing import Any

import pytest

import pglogq
from pglogq.consumer_async import PAGE_MAX, PAGE_MIN
from tests.support.consumers import MODES, Spec, run_once


def setup_queue(client: pglogq.Client, events: int, **config: Any) -> list[int]:
    client.create_queue("q")
    client.subscribe("q", "c")
    for key, value in config.items():
        client.set_queue_config("q", key, value)
    ids: list[int] = []
    for start in range(0, events, 1000):
        ids += client.send_batch("q", [{"n": i} for i in range(start, min(events, start + 1000))])
    client.tick("q", force=True)
    return ids


def pages_of(seen: list[tuple[int, int]]) -> list[int]:
    """The page sizes, from (index in its page, msg_id) of every handled event in order."""
    sizes: list[int] = []
    for index, _ in seen:
        if index == 0:
            sizes.append(0)
        sizes[-1] += 1
    return sizes


@pytest.mark.parametrize("mode", MODES)
def test_default_page_grows_for_quick_handlers(mode: str, client: pglogq.Client, dsn: str) -> None:
    """A quick handler: the first page holds PAGE_MIN events, the next ones up to four times
    the last; every event is handled once, in order, and acknowledged."""
    ids = setup_queue(client, 3000)
    seen: list[tuple[int, int]] = []
    spec = Spec(dsn, "q", "c")
    spec.handler()(lambda msg: seen.append((msg.index, msg.msg_id)))
    stats = run_once(mode, spec, stop_when_idle=True)
    sizes = pages_of(seen)
    assert [m for _, m in seen] == ids and stats.handled == 3000
    assert sizes[0] == PAGE_MIN and max(sizes) > PAGE_MIN
    assert all(b <= 4 * a for a, b in pairwise(sizes)), sizes
    assert len(client.receive("q", "c")) == 0


@pytest.mark.parametrize("mode", MODES)
def test_default_page_stays_small_for_slow_handlers(mode: str, client: pglogq.Client, dsn: str) -> None:
    """A handler taking 2 ms: 0.1 s of handler starts is 50 events, so the pages stay at PAGE_MIN
    (stop() and a takeover wait no longer than with a fixed page of 100)."""
    setup_queue(client, 300)
    seen: list[tuple[int, int]] = []
    spec = Spec(dsn, "q", "c")

    @spec.handler()
    def slow(msg: Any) -> None:
        seen.append((msg.index, msg.msg_id))
        time.sleep(0.002)

    run_once(mode, spec, stop_when_idle=True)
    assert pages_of(seen) == [PAGE_MIN] * 3


@pytest.mark.parametrize("mode", MODES)
def test_a_given_max_messages_fixes_the_page(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, 1000)
    seen: list[tuple[int, int]] = []
    spec = Spec(dsn, "q", "c", kwargs={"max_messages": 300})
    spec.handler()(lambda msg: seen.append((msg.index, msg.msg_id)))
    run_once(mode, spec, stop_when_idle=True)
    assert pages_of(seen) == [300, 300, 300, 100]


def test_page_size_arguments_and_defaults(dsn: str) -> None:
    c = pglogq.Consumer(dsn, "q", "c")
    assert c.max_messages is None and c.page_size == PAGE_MIN == 100 and PAGE_MAX == 10_000
    assert pglogq.AsyncConsumer(dsn, "q", "c").max_messages is None
    assert pglogq.Consumer(dsn, "q", "c", max_messages=5000).page_size == 5000
    for bad in (0, 100001):
        with pytest.raises(ValueError, match="max_messages"):
            pglogq.Consumer(dsn, "q", "c", max_messages=bad)
    for wrong in (True, "100", 1.5):
        with pytest.raises(TypeError, match="max_messages"):
            pglogq.Consumer(dsn, "q", "c", max_messages=wrong)
