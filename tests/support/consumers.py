"""Helpers for the consumer tests: run a Consumer or an AsyncConsumer with the same handlers.

Handlers are written once as plain functions of the delivery; for the AsyncConsumer they are
wrapped into coroutines (an awaitable result, e.g. from ``msg.progress()``, is awaited).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pglogq

MODES = ["thread", "asyncio"]


@dataclass
class Spec:
    """What to build: the consumer's arguments and its handlers."""

    dsn: str
    queue: str
    consumer: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    handlers: list[tuple[str, tuple[str | None, ...], Callable[..., Any]]] = field(default_factory=list)
    post_build: Callable[[Any], None] | None = None
    """Called with the consumer once it is built (tests that need to reach inside)."""
    sharded: list[str] | None = None
    """Seed DSNs of a cluster: the consumer gets a ShardedClient (AsyncShardedClient) of them,
    made in its own thread or event loop and closed after it (``dsn`` is then unused)."""
    sharded_kwargs: dict[str, Any] = field(default_factory=dict)

    def handler(self, *types: str | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.handlers.append(("handler", types, fn))
            return fn

        return deco

    def batch_handler(self, *types: str | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.handlers.append(("batch_handler", types, fn))
            return fn

        return deco


def close_thread(c: pglogq.Consumer) -> None:
    """Close the consumer's client, and the sharded client a Spec made for it."""
    c.close()
    if c.sharded_client is not None:
        c.sharded_client.close()


async def close_async(c: pglogq.AsyncConsumer) -> None:
    await c.aclose()
    if c.sharded_client is not None:
        await c.sharded_client.close()


def _wrap_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def call(arg: Any) -> Any:
        result = fn(arg)
        if inspect.isawaitable(result):
            return await result
        return result  # a handler's return value (its result, with store_result)

    return call


def build_thread(spec: Spec) -> pglogq.Consumer:
    target: Any = spec.dsn if spec.sharded is None else pglogq.ShardedClient(spec.sharded, **spec.sharded_kwargs)
    c = pglogq.Consumer(target, spec.queue, spec.consumer, **spec.kwargs)
    for kind, types, fn in spec.handlers:
        getattr(c, kind)(*types)(fn)
    if spec.post_build is not None:
        spec.post_build(c)
    return c


def build_async(spec: Spec) -> pglogq.AsyncConsumer:
    target: Any = spec.dsn if spec.sharded is None else pglogq.AsyncShardedClient(spec.sharded, **spec.sharded_kwargs)
    c = pglogq.AsyncConsumer(target, spec.queue, spec.consumer, **spec.kwargs)
    for kind, types, fn in spec.handlers:
        getattr(c, kind)(*types)(_wrap_async(fn))
    if spec.post_build is not None:
        spec.post_build(c)
    return c


class Running:
    """A consumer running in a background thread (its own event loop for asyncio)."""

    def __init__(self, mode: str, spec: Spec, run_kwargs: dict[str, Any]) -> None:
        self.mode = mode
        self.spec = spec
        self.run_kwargs = run_kwargs
        self.consumer: Any = None
        self.stats: pglogq.RunStats | None = None
        self.error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            if self.mode == "thread":
                self.consumer = build_thread(self.spec)
                self._ready.set()
                try:
                    self.stats = self.consumer.run(**self.run_kwargs)
                finally:
                    close_thread(self.consumer)
            else:
                self.loop = asyncio.new_event_loop()
                self.stats = self.loop.run_until_complete(self._amain())
                self.loop.close()
        except BaseException as exc:
            self.error = exc
            logging.getLogger("tests").exception("consumer crashed")
        finally:
            self._ready.set()

    async def _amain(self) -> pglogq.RunStats:
        self.consumer = build_async(self.spec)
        self._ready.set()
        try:
            result: pglogq.RunStats = await self.consumer.run(**self.run_kwargs)
            return result
        finally:
            await close_async(self.consumer)

    def start(self) -> Running:
        self.thread.start()
        self._ready.wait(30)
        return self

    def stop(self, *, abandon: bool = False) -> None:
        if self.mode == "thread" or threading.current_thread() is self.thread:
            self.consumer.stop(abandon=abandon)  # threads; or a handler on the consumer's loop
        elif self.loop is not None:
            self.loop.call_soon_threadsafe(lambda: self.consumer.stop(abandon=abandon))

    def join(self, timeout: float = 60) -> pglogq.RunStats:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "consumer did not stop"
        if self.error is not None:
            raise self.error
        assert self.stats is not None
        return self.stats


def run_once(mode: str, spec: Spec, **run_kwargs: Any) -> pglogq.RunStats:
    """Run to completion in this thread (``run_kwargs`` usually ``stop_when_idle=True``)."""
    if mode == "thread":
        c = build_thread(spec)
        try:
            return c.run(**run_kwargs)
        finally:
            close_thread(c)

    async def main() -> pglogq.RunStats:
        c = build_async(spec)
        try:
            result: pglogq.RunStats = await c.run(**run_kwargs)
            return result
        finally:
            await close_async(c)

    return asyncio.run(main())


@contextmanager
def running(mode: str, spec: Spec, **run_kwargs: Any) -> Iterator[Running]:
    r = Running(mode, spec, run_kwargs).start()
    try:
        yield r
    finally:
        if r.thread.is_alive():
            r.stop()
            r.thread.join(60)


# -- a worker application for real worker processes ------------------------------------------
#
#   PYTHONPATH=. python -m pglogq.worker --dsn DSN tests.support.consumers:make_worker
#
# configured by environment variables: T_QUEUE, T_CONSUMER, T_WORKER (default auto), T_MODE
# (thread | asyncio), T_SLEEP (seconds per message), T_PAGE (max_messages), T_HEARTBEAT,
# T_POLL.  Every handled message is recorded in table ``handled`` (see HANDLED_DDL) when done.

HANDLED_DDL = """
CREATE TABLE IF NOT EXISTS handled (
    msg_id      bigint NOT NULL,
    worker      text NOT NULL,
    pid         integer NOT NULL,
    batch_id    bigint NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL
)
"""


def make_worker() -> pglogq.Consumer | pglogq.AsyncConsumer:
    import os
    import time
    from datetime import datetime, timezone

    import psycopg

    env = os.environ
    dsn = env["PGLOGQ_DSN"]
    kwargs: dict[str, Any] = {
        "worker": env.get("T_WORKER", "auto"),
        "max_messages": int(env.get("T_PAGE", "100")),
        "heartbeat_interval": float(env.get("T_HEARTBEAT", "0.2")),
        "poll_interval": float(env.get("T_POLL", "0.2")),
    }
    sleep = float(env.get("T_SLEEP", "0"))
    record = psycopg.connect(dsn, autocommit=True)
    sql = "INSERT INTO handled VALUES (%s, %s, %s, %s, %s, %s)"

    def save(msg: Any, worker: str, started: datetime) -> None:
        record.execute(sql, (msg.msg_id, worker, os.getpid(), msg.batch_id, started, datetime.now(timezone.utc)))

    if env.get("T_MODE", "thread") == "asyncio":
        ac = pglogq.AsyncConsumer(dsn, env["T_QUEUE"], env["T_CONSUMER"], **kwargs)

        @ac.handler()
        async def ahandle(msg: pglogq.AsyncDelivery) -> None:
            started = datetime.now(timezone.utc)
            await asyncio.sleep(sleep)
            save(msg, msg.worker, started)

        return ac
    c = pglogq.Consumer(dsn, env["T_QUEUE"], env["T_CONSUMER"], **kwargs)

    @c.handler()
    def handle(msg: pglogq.Delivery) -> None:
        started = datetime.now(timezone.utc)
        time.sleep(sleep)
        save(msg, msg.worker, started)

    return c


# -- a transactional share consumer's worker process -----------------------------------------
#
#   PYTHONPATH=. python -m pglogq.worker --dsn DSN tests.support.consumers:make_tx_share_worker
#
# configured by T_QUEUE, T_CONSUMER, T_WORKER and T_SLOTS; its handler writes the event's effect
# in the event's own transaction (EFFECT_DDL): an insert, then the handler gate (advisory lock 1,
# shared: a test that holds it exclusively holds the handler after its write, before COMMIT); the
# commit gate (lock 2) holds the COMMIT itself, through a deferred trigger.

EFFECT_DDL = """
CREATE TABLE IF NOT EXISTS effect (msg_id bigint NOT NULL, worker text NOT NULL, retry_count integer NOT NULL);
CREATE OR REPLACE FUNCTION effect_commit_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(2);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS effect_commit_gate ON effect;
CREATE CONSTRAINT TRIGGER effect_commit_gate AFTER INSERT ON effect DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION effect_commit_gate();
"""
EFFECT_INSERT = "INSERT INTO effect VALUES (%s, %s, %s)"
HANDLER_GATE = "SELECT pg_advisory_xact_lock_shared(1)"


def make_tx_share_worker() -> pglogq.Consumer:
    import os

    env = os.environ
    c = pglogq.Consumer(env["PGLOGQ_DSN"], env["T_QUEUE"], env["T_CONSUMER"], worker=env.get("T_WORKER", "auto"),
                        share=True, transactional=True, concurrency=int(env.get("T_SLOTS", "2")),
                        heartbeat_interval=0.2, poll_interval=0.2)

    @c.handler()
    def handle(msg: pglogq.Delivery) -> None:
        assert msg.conn is not None
        msg.conn.execute(EFFECT_INSERT, (msg.msg_id, msg.worker, msg.retry_count))
        msg.conn.execute(HANDLER_GATE)

    return c
