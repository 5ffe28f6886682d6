"""What every measured system offers the scenarios (each capability is optional)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from tests.harness.bench.context import BenchContext

Record = Callable[[int, float], None]
"""Called by a latency consumer with (seq, handler start time) for every event."""


class System:
    """A system under test.  Subclasses set ``name`` and implement what they support.

    Produce workers are module-level functions ``fn(conf, mode, batch, client_index, start_at,
    stop_at) -> events`` so that they can run in the spawned worker processes.
    """

    name: ClassVar[str] = ""
    produce_modes: ClassVar[tuple[str, ...]] = ()  # of "single", "batch", "app_txn", "copy"
    produce_worker: ClassVar[Callable[..., int] | None] = None
    latency_producer: ClassVar[Callable[..., list[tuple[int, float]]] | None] = None
    max_drain_workers: ClassVar[int | None] = None  # None: any number of cooperating drain workers
    key: ClassVar[str] = ""  # what --systems selects it by (default: the first word of name, lower case)
    durable: ClassVar[bool] = True  # an acknowledged event survives a crash of the machine
    durability: ClassVar[str] = ("durable per commit: a PostgreSQL transaction (flushed to the WAL before "
                                 "the commit returns, with fsync=on and synchronous_commit=on)")

    def __init__(self, ctx: BenchContext) -> None:
        self.ctx = ctx

    def unavailable(self) -> str | None:
        """Why this system cannot be measured here (None: it can)."""
        return None

    def setup(self) -> None:
        """Create what the system needs (tables, queues, servers)."""

    def teardown(self) -> None:
        """Release what setup made that outlives the bench database (servers, broker queues)."""

    def cleanup(self) -> None:
        """Drop what the last scenario step left behind (so that the next scenario measures its
        own work only: e.g. the ticker visits every queue of the database)."""

    def conf(self) -> dict[str, Any]:
        """What a worker process needs to reach the system."""
        return {"dsn": self.ctx.dsn}

    def version(self) -> str:
        return ""

    # -- consume ------------------------------------------------------------------------------
    def preload(self, n: int) -> None:
        raise NotImplementedError

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        """Consume the preloaded backlog with ``workers`` workers: (events, seconds)."""
        raise NotImplementedError

    # -- end-to-end latency ---------------------------------------------------------------------
    def latency_setup(self, rate: int) -> None:
        """Prepare an empty queue for a latency run (called before the consumer starts)."""

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        """Consume until ``expected`` events were seen or ``deadline``; call ``record`` at the
        start of each handler; set ``ready`` once listening."""
        raise NotImplementedError

    def latency_conf(self) -> dict[str, Any]:
        return self.conf()

    def supports(self, capability: str) -> bool:
        base = getattr(System, capability, None)
        mine = getattr(type(self), capability, None)
        return mine is not None and mine is not base
