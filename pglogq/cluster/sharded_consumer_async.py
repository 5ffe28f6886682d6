"""A consumer on a cluster of shards: ordinary receive loops, ``workers`` of them on every shard.

``pglogq/cluster/sharded_consumer.py`` (threads) is generated from this file by ``python -m tests.tools.unasync``.
The consumer (:class:`~pglogq.AsyncConsumer` given an :class:`AsyncShardedClient`) hands its run
to :func:`run`: each loop is a :class:`ShardLoop`, a receive loop of the consumer on one shard's
client, that also passes the gates of moves of slots, waits out a shard that is down (backing off)
or that does not have the queue or the consumer yet, and in a drain waits for the old shard of a
move that gates it.  A watcher reads the shard map while the consumer runs and starts the loops of
shards that joined the cluster.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pglogq import _concurrency_async
from pglogq._consumer_loop_async import RECOVERABLE, ReceiveLoop
from pglogq._runtime import RunStats, total
from pglogq._wakeup_async import send_probe
from pglogq.client_async import AsyncBatch, AsyncClient
from pglogq.errors import ConsumerGated, PglogqError, ShardUnavailable, UnknownConsumer, UnknownQueue

if TYPE_CHECKING:
    from pglogq.cluster.sharded_client_async import AsyncShardedClient
    from pglogq.consumer_async import AsyncConsumer

log = logging.getLogger("pglogq.consumer")

SHARD_BACKOFF_MAX = 5.0
"""The longest wait (seconds; at least ``poll_interval``) of a shard's loop between two tries
while its shard is down: the wait doubles from ``poll_interval`` at each failure in a row."""

MAP_REFRESH = 30.0
"""Seconds between two reads of the shard map by a sharded consumer that runs (not a drain):
a shard added to the cluster meanwhile gets its loops then."""


async def run(
    sharded: AsyncShardedClient, consumer: AsyncConsumer, stop_when_idle: bool, max_batches: int | None
) -> RunStats:
    """Run ``consumer``'s receive loops on every shard of ``sharded``'s map (the first loop that
    fails stops the others); while not a drain, a watcher reads the map every ``MAP_REFRESH``
    seconds and starts the loops of shards added meanwhile.  The sum of what the loops did."""
    need = consumer.workers * (consumer.concurrency + 2)
    if sharded.max_size < need:
        log.warning("%r: the sharded client's pools hold %d connections per shard; %d loops of concurrency %d "
                    "on each shard may need %d (make the client with max_size=%d)", consumer,
                    sharded.max_size, consumer.workers, consumer.concurrency, need, need)
    early = RunStats()  # the map cannot be read while no seed answers: wait, as a loop would
    while True:
        try:
            shard_map = await sharded.refresh_map()
            break
        except ShardUnavailable as exc:
            early.errors += 1
            longest = max(consumer.poll_interval, SHARD_BACKOFF_MAX)
            wait = float(min(longest, consumer.poll_interval * 2.0 ** early.errors))
            log.warning("%r: cannot read the shard map (%s); trying again in %g s", consumer, exc, wait)
            if await _concurrency_async.wait_event(consumer._stop_event, wait):
                return early
    runs = await ShardedRun(sharded, consumer).serve(list(shard_map.shard_names), stop_when_idle, max_batches)
    return total([early, *runs])


class ShardedRun:
    """One run of a consumer on a cluster: its loops, and how many loops of each shard still run
    (a gated loop of a drain waits while the loops of the move's old shard run)."""

    def __init__(self, sharded: AsyncShardedClient, consumer: AsyncConsumer) -> None:
        self.sharded = sharded
        self.consumer = consumer
        self.active: dict[str, int] = {}
        self.served: set[str] = set()

    async def serve(self, shards: list[str], stop_when_idle: bool, max_batches: int | None) -> list[RunStats]:
        """The loops of ``shards`` (and, unless a drain, the watcher of the map), until they end."""
        consumer = self.consumer
        loops: list[ShardLoop] = []
        names: list[str | None] = [*consumer._loop_names] or [consumer.worker_name]
        for shard in shards:
            client = await self.sharded.shard_client(shard)
            self.served.add(shard)
            self.active[shard] = self.active.get(shard, 0) + len(names)
            loops.extend(ShardLoop(consumer, client, name, shard, self) for name in names)
        consumer._attach(loops)
        fns: list[Callable[[], Any]] = [
            functools.partial(self._run_loop, loop, stop_when_idle, max_batches) for loop in loops
        ]
        if not stop_when_idle and max_batches is None:
            fns.append(self._watch_map)
        runs = await _concurrency_async.gather(fns)
        out: list[RunStats] = []
        for r in runs:
            out.extend(r if isinstance(r, list) else [r])
        return out

    async def _run_loop(self, loop: ShardLoop, stop_when_idle: bool, max_batches: int | None) -> RunStats:
        try:
            return await self.consumer._run_loop(loop, stop_when_idle, max_batches)
        finally:
            self.active[loop.shard] -= 1

    async def _watch_map(self) -> list[RunStats]:
        """Read the shard map every ``MAP_REFRESH`` seconds until stopped (or every loop ended); a
        shard that is new gets its loops (and this watcher goes on beside them)."""
        consumer = self.consumer
        read_at = time.monotonic() + MAP_REFRESH
        while any(self.active.values()) and not await _concurrency_async.wait_event(consumer._stop_event, 0.5):
            if time.monotonic() < read_at:
                continue
            read_at = time.monotonic() + MAP_REFRESH
            try:
                shard_map = await self.sharded.refresh_map()
            except (PglogqError, *RECOVERABLE) as exc:
                log.warning("%r: cannot read the shard map (%s); trying again in %g s", consumer, exc, MAP_REFRESH)
                continue
            new = [s for s in shard_map.shard_names if s not in self.served]
            if new:
                log.info("%r: shard(s) %s joined the cluster: starting their loops", consumer, ", ".join(new))
                return await self.serve(new, False, None)
        return []

    def old_shard_runs(self, gated: ConsumerGated) -> bool:
        """True while loops of this run still read the old shard of the move that ``gated`` a loop."""
        return gated.from_shard is not None and self.active.get(gated.from_shard, 0) > 0


class ShardLoop(ReceiveLoop):
    """A receive loop of a sharded consumer on one shard (``client``: that shard's).

    Beside what every loop does: a receive gated by an unfinished move of slots passes the gate
    once the consumer has finished the move's old shard up to the move's fence (the loops there go
    on meanwhile), else finds nothing; a drain's gated loop waits while the old shard's loops run,
    then looks at the fence once more.  A shard that is down, or that joined the cluster before
    ``create_queue`` and ``subscribe`` made the queue and the consumer there, stops only this
    loop: it tries again after ``poll_interval``, doubling up to ``SHARD_BACKOFF_MAX`` seconds."""

    recoverable = (*RECOVERABLE, UnknownQueue, UnknownConsumer)
    backoff_max = SHARD_BACKOFF_MAX  # the other shards flow meanwhile

    def __init__(
        self, consumer: AsyncConsumer, client: AsyncClient, name: str | None, shard: str, run: ShardedRun
    ) -> None:
        super().__init__(consumer, client, name)
        self.shard: str = shard
        self.run = run
        self._gated: ConsumerGated | None = None  # what gated the last receive
        self._last_look = False  # a drain's gated loop looked at the fence after the old shard's loops ended

    async def _conninfo(self) -> str:
        return await self.client.conninfo()  # LISTEN on its own shard

    async def _send_probe(self, channel: str) -> None:
        await send_probe(self.client, channel)

    async def _learn_partitioned(self) -> bool:
        rows = await self.client.queue_info(self.queue)
        if not rows:
            raise UnknownQueue(f'unknown queue "{self.queue}"')
        return rows[0].partitions > 1

    async def _receive(self) -> AsyncBatch | None:
        self._gated = None
        try:
            batch = await super()._receive()
        except ConsumerGated as exc:
            if await self.run.sharded.pass_gate(self.queue, self.consumer_name, self.shard, exc):
                log.info("%r: passed the gate of move %s (the old shard %s is done up to its fence)",
                         self, exc.move_id, exc.from_shard)
                return None
            self._gated = exc
            batch = AsyncBatch(None, self.queue, self.consumer_name, [], self.client)
        return batch

    def _log_error(self, exc: BaseException, wait: float) -> None:
        if isinstance(exc, (UnknownQueue, UnknownConsumer)):
            # a shard that joined the cluster lately: create_queue and subscribe make them
            log.warning("%r: %s on shard %s (create_queue and subscribe through the sharded client "
                        "make them on every shard); trying again in %g s", self, exc, self.shard, wait)
        else:
            super()._log_error(exc, wait)

    def _drained(self) -> bool:
        gated = self._gated
        if gated is None or (not self.run.old_shard_runs(gated) and self._last_look):
            return True
        # gated: wait while the old shard's loops run, then look at the fence once more
        self._last_look = not self.run.old_shard_runs(gated)
        return False
