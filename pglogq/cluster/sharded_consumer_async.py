"""A consumer on a cluster of shards: ``workers`` receive loops on every shard (a share consumer's
``workers * concurrency`` handler slots).

``pglogq/cluster/sharded_consumer.py`` (threads) is generated from this file by ``python -m tests.tools.unasync``.
The consumer (:class:`~pglogq.AsyncConsumer` given an :class:`AsyncShardedClient`) hands its run
to :func:`run`: each loop is a :class:`ShardLoop`, a receive loop of the consumer on one shard's
client (a :class:`ShardSlot` for a share consumer, a handler slot there), that also passes the
gates of moves of slots, waits out a shard that is down (backing off)
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
from pglogq._consumer_loop_async import RECOVERABLE, ReceiveLoop, ShareSlot, SlotGroup
from pglogq._runtime import RunStats, loop_names, total
from pglogq._wakeup_async import AsyncSharedWakeup, AsyncWakeup, send_probe
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
    if consumer.share is not False:
        need = max(need, 2 * consumer.workers * consumer.concurrency + 2)  # as a share consumer's client
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
    shared = await _learn_share(sharded, consumer, list(shard_map.shard_names), early)
    if shared is None:
        return early  # stopped while no shard said the consumer's mode
    runs = await ShardedRun(sharded, consumer, shared).serve(list(shard_map.shard_names), stop_when_idle, max_batches)
    return total([early, *runs])


async def _learn_share(
    sharded: AsyncShardedClient, consumer: AsyncConsumer, shards: list[str], early: RunStats
) -> bool | None:
    """Whether the consumer is a share consumer: ``consumer_info`` of the first shard that knows
    it (subscribed through the sharded client, it has one mode on every shard), checked against
    the ``share`` setting.  While no shard answers, waits as a loop would (the errors counted in
    ``early``); None when stopped meanwhile."""
    while True:
        for shard in shards:
            try:
                client = await sharded.shard_client(shard)
                rows = await client.consumer_info(consumer.queue, consumer.consumer_name)
            except (ShardUnavailable, UnknownQueue, UnknownConsumer, *RECOVERABLE):
                continue
            if rows:
                return consumer._take_mode(bool(rows[0].share))
        if consumer.share is False:
            return consumer._take_mode(False)  # ordinary loops wait for their shards themselves
        early.errors += 1
        longest = max(consumer.poll_interval, SHARD_BACKOFF_MAX)
        wait = float(min(longest, consumer.poll_interval * 2.0 ** min(early.errors, 32)))
        log.warning("%r: no shard knows the consumer yet (down, or not subscribed there); trying again in %g s",
                    consumer, wait)
        if await _concurrency_async.wait_event(consumer._stop_event, wait):
            return None


class ShardedRun:
    """One run of a consumer on a cluster: its loops, and how many loops of each shard still run
    (a gated loop of a drain waits while the loops of the move's old shard run)."""

    def __init__(self, sharded: AsyncShardedClient, consumer: AsyncConsumer, shared: bool = False) -> None:
        self.sharded = sharded
        self.consumer = consumer
        self.shared = shared
        """Whether the consumer runs as a share consumer (handler slots on every shard)."""
        self.active: dict[str, int] = {}
        self.served: set[str] = set()
        self.group = SlotGroup(consumer) if shared else None  # every shard's slots: one drain

    async def serve(self, shards: list[str], stop_when_idle: bool, max_batches: int | None) -> list[RunStats]:
        """The loops of ``shards`` (and, unless a drain, the watcher of the map), until they end."""
        consumer = self.consumer
        loops: list[_OnShard] = []
        listeners: list[AsyncSharedWakeup] = []
        for shard in shards:
            client = await self.sharded.shard_client(shard)
            self.served.add(shard)
            if self.group is not None:
                names = loop_names(consumer.worker_name, consumer.workers * consumer.concurrency)
                conninfo = None if consumer.pooled else await client.conninfo()
                listener = AsyncSharedWakeup(AsyncWakeup(
                    conninfo, consumer.queue, consumer._stop_event, functools.partial(send_probe, client),
                    consumer.listen_probe_timeout,
                ))
                listeners.append(listener)
                loops.extend(ShardSlot(consumer, client, name, shard, self, listener, self.group) for name in names)
            else:
                plain: list[str | None] = [*consumer._loop_names] or [consumer.worker_name]
                loops.extend(ShardLoop(consumer, client, name, shard, self) for name in plain)
            self.active[shard] = self.active.get(shard, 0) + sum(1 for x in loops if x.shard == shard)
        consumer._attach(loops)
        fns: list[Callable[[], Any]] = [
            functools.partial(self._run_loop, loop, stop_when_idle, max_batches) for loop in loops
        ]
        if not stop_when_idle and max_batches is None:
            fns.append(self._watch_map)
        try:
            runs = await _concurrency_async.gather(fns)
        finally:
            for listener in listeners:
                await listener.shut()
        out: list[RunStats] = []
        for r in runs:
            out.extend(r if isinstance(r, list) else [r])
        return out

    async def _run_loop(self, loop: _OnShard, stop_when_idle: bool, max_batches: int | None) -> RunStats:
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


class _OnShard(ReceiveLoop):
    """What a loop of a sharded consumer does on its shard beside what every loop does (the base
    of :class:`ShardLoop` and :class:`ShardSlot`): a receive gated by an unfinished move of slots
    passes the gate once the consumer has finished the move's old shard up to the move's fence
    (the loops there go on meanwhile), else finds nothing; a drain's gated loop waits while the
    old shard's loops run, then looks at the fence once more.  A shard that is down, or that
    joined the cluster before ``create_queue`` and ``subscribe`` made the queue and the consumer
    there, stops only this loop: it tries again after ``poll_interval``, doubling up to
    ``SHARD_BACKOFF_MAX`` seconds."""

    recoverable = (*RECOVERABLE, UnknownQueue, UnknownConsumer)
    backoff_max = SHARD_BACKOFF_MAX  # the other shards flow meanwhile
    shard: str

    def _on_shard(self, shard: str, run: ShardedRun) -> None:
        self.shard = shard
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
        if gated is not None and not (not self.run.old_shard_runs(gated) and self._last_look):
            # gated: wait while the old shard's loops run, then look at the fence once more
            self._last_look = not self.run.old_shard_runs(gated)
            return False
        return super()._drained()


class ShardLoop(_OnShard):
    """A receive loop of a sharded consumer on one shard (``client``: that shard's), see
    :class:`_OnShard`."""

    def __init__(
        self, consumer: AsyncConsumer, client: AsyncClient, name: str | None, shard: str, run: ShardedRun
    ) -> None:
        super().__init__(consumer, client, name)
        self._on_shard(shard, run)


class ShardSlot(_OnShard, ShareSlot):
    """A handler slot of a sharded share consumer on one shard (``client``: that shard's): a
    :class:`ShareSlot` whose leases are of that shard, with the gates and the waits of
    :class:`_OnShard`; the slots of one shard share ``listener``."""

    def __init__(
        self, consumer: AsyncConsumer, client: AsyncClient, name: str, shard: str, run: ShardedRun,
        listener: AsyncSharedWakeup, group: SlotGroup,
    ) -> None:
        ShareSlot.__init__(self, consumer, client, name, listener, group)
        self._on_shard(shard, run)
