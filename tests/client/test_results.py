"""client.result / AsyncClient.result: wait for a job's final outcome and its result, with LISTEN."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

import pglogq
from tests.support.jobs import setup


def consume(dsn: str, *, store: bool = True) -> pglogq.RunStats:
    c = pglogq.Consumer(dsn, "q", "c", store_result=store)

    @c.handler("t")
    def square(msg: Any) -> Any:
        if msg.payload["n"] == 1:
            raise pglogq.Nack("one is not allowed")  # max_retries 0: dead at once
        return {"square": msg.payload["n"] ** 2}

    try:
        return c.run(stop_when_idle=True)
    finally:
        c.close()


def test_result_waits_for_the_consumer(client: pglogq.Client, dsn: str) -> None:
    """The waiter starts first and blocks; the consumer runs afterwards: its NOTIFY wakes it."""
    ids = setup(client, 3, max_retries=0)
    got: dict[int, pglogq.JobResult | None] = {}
    listening = threading.Event()

    def waiter(m: int) -> None:
        with pglogq.Client(dsn) as c:
            listening.set()
            got[m] = c.result("q", m, "c", timeout=600)

    threads = [threading.Thread(target=waiter, args=(m,)) for m in (ids[0], ids[1])]
    for t in threads:
        t.start()
    listening.wait(30)
    consume(dsn)
    for t in threads:
        t.join(600)
    done, dead = got[ids[0]], got[ids[1]]
    assert done is not None
    assert (done.outcome, done.final, done.result, done.attempt) == ("done", True, {"square": 0}, 1)
    assert dead is not None and (dead.outcome, dead.final) == ("dead", True) and dead.error
    assert dead.result is None


def test_result_times_out_with_none(client: pglogq.Client) -> None:
    [m] = setup(client, 1)
    assert client.result("q", m, "c", timeout=timedelta(milliseconds=200)) is None
    with pytest.raises(pglogq.InvalidArgument):
        client.result("q", m, "c", timeout="soon")  # type: ignore[arg-type]
    with pytest.raises(pglogq.UnknownQueue):
        client.result("nope", m, "c", timeout=0)


def test_async_result(client: pglogq.Client, dsn: str) -> None:
    [m] = setup(client, 1)
    consume(dsn)

    async def main() -> pglogq.JobResult | None:
        async with pglogq.AsyncClient(dsn) as c:
            return await c.result("q", m, "c", timeout=5)

    r = asyncio.run(main())
    assert r is not None and (r.outcome, r.result) == ("done", {"square": 0})
