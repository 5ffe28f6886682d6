"""The asyncio client of a cluster of shards: the single source of truth of the sharded client.

``pglogq/cluster/sharded_client.py`` (the blocking :class:`ShardedClient`) is generated from this file by
``python -m tests.tools.unasync``; write here, never there.

A cluster (``pglogq cluster init``) spreads every queue over several PostgreSQL servers, the
shards.  Each keyed event goes to the shard that owns its hash slot in the shard map; unkeyed
events go to any shard.  This client reads the map from a seed, keeps one :class:`AsyncClient`
(one connection pool) per shard and routes each call.  How it meets a shard that is down:

- a keyed ``send`` (and the events of ``send_batch`` whose keys it owns) raises
  :class:`~pglogq.errors.ShardUnavailable`; an unkeyed one goes to another shard;
- ``receive`` skips it (and leaves it alone for a while, 1 s doubling up to 30 s);
- ``queue_info`` and ``consumer_info`` mark it unavailable (``shards[name]`` is None);
- ``create_queue``, ``subscribe``, ``unsubscribe``, ``drop_queue`` and ``tick`` do the other
  shards, then raise :class:`~pglogq.errors.ShardUnavailable` (call again once it is back: each
  is idempotent on a shard where it was done).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row
from typing_extensions import LiteralString, Self, Unpack

import pglogq._args as a
from pglogq import keys as _keys
from pglogq._args import EventOptions, SendBatchOptions, SendOptions
from pglogq._runtime import RunStats
from pglogq.client_async import AnyConn, AsyncBatch, AsyncClient
from pglogq.cluster import _sharding, sharded_consumer_async
from pglogq.cluster.shardmap import ShardMap, redacted
from pglogq.consumer_async import AsyncClusterClient, AsyncConsumer
from pglogq.errors import (
    ClientClosed,
    ConsumerGated,
    InvalidArgument,
    KeyMoved,
    NotAClusterMember,
    PglogqError,
    ShardUnavailable,
    UnknownConsumer,
    UnknownQueue,
    translate,
)
from pglogq.models import ConsumerInfo, Message, QueueInfo, ShardedConsumerInfo, ShardedQueueInfo

_CLUSTER_MAP: LiteralString = "SELECT pglogq.cluster_map()"
_FENCE_PASSED: LiteralString = "SELECT pglogq.cluster_fence_passed(%s, %s, %s)"
_GATE_PASS: LiteralString = "SELECT pglogq.cluster_gate_pass(%s, %s, %s)"


class AsyncShardedClient(AsyncClusterClient):
    """pglogq client of a cluster of shards, for asyncio.

    ``AsyncShardedClient(seeds)``: ``seeds`` a DSN or a list of DSNs of shards of the cluster;
    the map is read from the first that answers when the client first needs it (or at
    :meth:`refresh_map`).  The map's DSNs carry no password: the client connects to every shard
    with the user, password and options of the seed that answered (see
    :func:`pglogq.cluster.shardmap.shard_dsn`).

    ``min_size``, ``max_size``, ``pooled``: as for :class:`AsyncClient`, for each shard's pool
    (a :class:`AsyncConsumer` given this client uses each shard's pool for its loops there: give
    ``max_size`` at least ``workers * (concurrency + 2)``);
    ``shard_timeout``: the seconds a call waits for a connection to a shard before it counts the
    shard down (:class:`~pglogq.errors.ShardUnavailable`).

    Message, batch and tick ids are numbered by each shard: an id names an event within its
    shard only (a received :class:`AsyncBatch` says which, ``batch.shard``).

    With asyncio, use one client per event loop (its pools belong to the loop that first used them).
    """

    def __init__(
        self,
        seeds: str | Sequence[str],
        *,
        min_size: int = 1,
        max_size: int = 8,
        pooled: bool = False,
        shard_timeout: float = 5.0,
    ) -> None:
        listed = [seeds] if isinstance(seeds, str) else list(seeds)
        if not listed or not all(isinstance(s, str) and s.strip() for s in listed):
            raise InvalidArgument("seeds: a DSN or a non-empty list of DSNs of the cluster's shards is expected")
        for s in listed:
            try:
                conninfo_to_dict(s)
            except psycopg.ProgrammingError as exc:
                raise InvalidArgument(f"invalid seed DSN {redacted(s)}: {exc}") from None
        if isinstance(shard_timeout, bool) or not isinstance(shard_timeout, (int, float)) or shard_timeout <= 0:
            raise InvalidArgument(f"shard_timeout must be a positive number of seconds, got {shard_timeout!r}")
        self.seeds = listed
        self.min_size = min_size
        self.max_size = max_size
        self.pooled = bool(pooled)
        self.shard_timeout = float(shard_timeout)
        self._seed = listed[0]  # whose credentials the shards get (the seed that answered)
        self._map: ShardMap | None = None
        self._clients: dict[str, tuple[str, AsyncClient]] = {}  # shard -> (its DSN, its client)
        self._retired: list[AsyncClient] = []  # clients of a shard whose DSN changed (closed at close)
        self._down = _sharding.DownShards()
        self._lock = threading.Lock()  # never held across an await
        self._next_send = itertools.count()
        self._next_receive: dict[tuple[str, str, str | None], int] = {}
        self._closed = False
        # send(conn=...) and send_batch(conn=...) run on the caller's connection only: this
        # client never opens its pool
        self._conn_client = AsyncClient(listed[0], min_size=0, max_size=1, pooled=self.pooled)

    def __repr__(self) -> str:
        m = self._map
        where = f"{m.cluster} v{m.version}, {len(m.shards)} shards" if m is not None else "map not read yet"
        return f"<{type(self).__name__} {where}>"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every shard's pool.  Calls after this raise :class:`ClientClosed`."""
        with self._lock:
            self._closed = True
            clients = [c for _, c in self._clients.values()] + self._retired
            self._clients, self._retired = {}, []
        for c in clients:
            await c.close()
        await self._conn_client.close()

    # -- a consumer on the cluster -----------------------------------------------------------------

    async def _run_consumer(
        self, consumer: AsyncConsumer, stop_when_idle: bool, max_batches: int | None
    ) -> RunStats:
        """``consumer.run`` given this client: its receive loops on every shard."""
        return await sharded_consumer_async.run(self, consumer, stop_when_idle, max_batches)

    # -- the map ----------------------------------------------------------------------------------

    @property
    def map(self) -> ShardMap | None:
        """The shard map as last read (None until a call needed it: see :meth:`refresh_map`)."""
        return self._map

    async def refresh_map(self, *, prefer: str | None = None) -> ShardMap:
        """Read the shard map again and use it from now on; returns it.

        Asks ``prefer`` first (a shard's name: the one that said a key moved), then the shards of
        the current map, then the seeds, and takes the first answer whose version is not older
        than the map in use.  :class:`~pglogq.errors.ShardUnavailable` when none answers."""
        self._check_open()
        current = self._map
        names = [] if current is None else sorted(current.shard_names, key=self._down.is_down)  # down ones last
        if prefer is not None:
            names = [prefer] + [n for n in names if n != prefer]
        errors: list[str] = []
        for name in names:
            if name not in self._clients and (current is None or name not in current.shards):
                continue
            try:
                async with self._on(name, mark=False) as client, client.connection() as conn:
                    got = await _read_map(conn)
            except (ShardUnavailable, NotAClusterMember) as exc:
                errors.append(f"{name}: {exc}")
                continue
            if current is None or got.version >= current.version:
                return self._use(got, None)
        for seed in self.seeds:
            try:
                seed_conn = await psycopg.AsyncConnection.connect(
                    seed, autocommit=True, **_connect_options(seed, self.shard_timeout)
                )
            except (psycopg.OperationalError, OSError) as exc:  # whatever the reason, not reachable
                errors.append(f"{redacted(seed)}: {exc}")
                continue
            try:
                async with seed_conn:
                    got = await _read_map(seed_conn)
            except NotAClusterMember as exc:
                errors.append(f"{redacted(seed)}: {exc}")
                continue
            except psycopg.Error as exc:
                if not _sharding.unreachable(exc):
                    raise
                errors.append(f"{redacted(seed)}: {exc}")
                continue
            if current is None or got.version >= current.version:
                return self._use(got, seed)
        if current is not None:
            return current  # nobody knows a newer map
        raise ShardUnavailable("no seed of the cluster answered with its shard map: " + "; ".join(errors))

    def _use(self, new: ShardMap, seed: str | None) -> ShardMap:
        with self._lock:
            if self._closed:
                raise ClientClosed(f"{type(self).__name__} is closed")
            if self._map is not None and new.version < self._map.version:
                return self._map  # a newer one came meanwhile
            if seed is not None and self._map is None:
                self._seed = seed
            self._map = new
            for name in new.shard_names:
                dsn = new.dsn(name, self._seed)
                old = self._clients.get(name)
                if old is not None and old[0] != dsn:
                    self._retired.append(old[1])
                    del self._clients[name]
            return new

    async def _current(self) -> ShardMap:
        m = self._map
        if m is None:
            m = await self.refresh_map()
        return m

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(f"{type(self).__name__} is closed")

    async def shard_client(self, shard: str) -> AsyncClient:
        """The :class:`AsyncClient` of ``shard`` (for the calls this client does not route;
        closed with this client).  KeyError for a shard the map does not name."""
        await self._current()
        return self._client(shard)

    async def shard_for(self, queue: str, key: str) -> str:
        """The DSN of the shard that holds ``key``'s events of ``queue`` under the current map,
        with this client's credentials (e.g. for the connection of ``send(..., conn=...)``).

        Every queue of a cluster shares one map: ``queue`` is checked, not used."""
        if not isinstance(queue, str) or not queue:
            raise InvalidArgument(f"invalid queue name {queue!r}")
        m = await self._current()
        return m.dsn(m.shard_for_key(_keys.check_key(key)), self._seed)

    def _client(self, shard: str) -> AsyncClient:
        with self._lock:
            if self._closed:
                raise ClientClosed(f"{type(self).__name__} is closed")
            got = self._clients.get(shard)
            if got is not None:
                return got[1]
            m = self._map
            if m is None or shard not in m.shards:
                raise KeyError(f"shard {shard!r} is not in the cluster's map")
            dsn = m.dsn(shard, self._seed)
            client = AsyncClient(dsn, min_size=self.min_size, max_size=self.max_size, pooled=self.pooled)
            client._pool_timeout = self.shard_timeout
            self._clients[shard] = (dsn, client)
            return client

    @asynccontextmanager
    async def _on(self, shard: str, *, mark: bool = True) -> AsyncIterator[AsyncClient]:
        """``shard``'s client; an error saying the shard is unreachable becomes ShardUnavailable
        (and, with ``mark``, leaves the shard alone for a while in receive)."""
        client = self._client(shard)
        try:
            yield client
        except Exception as exc:
            if not _sharding.unreachable(exc):
                raise
            wait = self._down.failed(shard) if mark else 0.0
            dsn = self._clients.get(shard, ("?", None))[0]
            raise ShardUnavailable(
                f'shard "{shard}" ({redacted(dsn)}) is unavailable: {exc}'
                + (f"; receive leaves it alone for {wait:g} s" if wait else "")
            ) from exc
        self._down.answered(shard)

    # -- queues and consumers, on every shard -------------------------------------------------

    async def _on_every(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call ``method`` of every shard's client; their results by shard.  The map is read
        first (a shard added lately gets the call too).  Shards that are down are left out, then
        ShardUnavailable names them (after every other shard was called)."""
        m = await self.refresh_map()
        results: dict[str, Any] = {}
        down: list[ShardUnavailable] = []
        for name in m.shard_names:
            try:
                async with self._on(name) as client:
                    results[name] = await getattr(client, method)(*args, **kwargs)
            except ShardUnavailable as exc:
                down.append(exc)
        if down:
            done = ", ".join(results) or "none"
            raise ShardUnavailable(
                f"{method} was not done on {len(down)} shard(s) of {len(m.shards)} (done on: {done}): "
                + "; ".join(e.message for e in down),
                hint="call it again once the shard is back (it is idempotent on the shards where it was done)",
            ) from down[0]
        return results

    async def create_queue(self, queue: str, *, partitions: int = 1, urgent_lane: bool = False) -> bool:
        """Create ``queue`` on every shard of the map, read anew (see
        :meth:`AsyncClient.create_queue`); True when it was created on at least one.  Not atomic
        across shards: a shard that is down raises ShardUnavailable after the others (call
        again).  The map is read first: a shard added to the cluster gets the queue too
        (``pglogq cluster add-shard`` makes the existing queues and consumers there already)."""
        done = await self._on_every("create_queue", queue, partitions=partitions, urgent_lane=urgent_lane)
        return any(done.values())

    async def drop_queue(self, queue: str, *, force: bool = False) -> bool:
        """Drop ``queue`` on every shard; True when it was dropped on at least one."""
        return any((await self._on_every("drop_queue", queue, force=force)).values())

    async def subscribe(self, queue: str, consumer: str, *, share: bool = False, lanes: bool = False) -> bool:
        """Subscribe ``consumer`` on every shard; True when it was new on at least one.  It
        receives the events ticked from now on, on each shard.  ``share=True``: a share consumer
        on every shard (see :meth:`AsyncClient.subscribe`): a worker's lease holds events of one
        shard, and the consumer runtime runs its handler slots on each shard; ``lanes=True``: with
        lanes on every shard."""
        return any((await self._on_every("subscribe", queue, consumer, share=share, lanes=lanes)).values())

    async def unsubscribe(self, queue: str, consumer: str) -> bool:
        """Unsubscribe ``consumer`` on every shard; True when it was subscribed on at least one."""
        return any((await self._on_every("unsubscribe", queue, consumer)).values())

    async def set_queue_config(self, queue: str, param: str, value: object) -> str:
        """Change one setting of ``queue`` on every shard; returns the new value."""
        done = await self._on_every("set_queue_config", queue, param, value)
        return str(next(iter(done.values())))

    async def tick(self, queue: str | None = None, *, force: bool = False) -> int:
        """Tick on every shard (see :meth:`AsyncClient.tick`); the ticks made, summed.  Each
        shard needs its ticker anyway (``pglogq-ticker`` per server): this is for tests and tools."""
        return sum((await self._on_every("tick", queue, force=force)).values())

    # -- producing ------------------------------------------------------------------------------

    async def send(
        self, queue: str, payload: Any, *, conn: AnyConn | None = None, **options: Unpack[SendOptions]
    ) -> int:
        """Append one event to the shard that owns ``key``'s slot; its message id (on that shard).
        ``options``: :meth:`AsyncClient.send`'s (:class:`~pglogq.SendOptions`).

        ``key`` None: the next shard in turn (round robin; one that is down is passed over),
        unless ``idempotency_key`` is given: then the shard of that key's slot, so that a retry of
        the same send meets its first attempt.  When the shard answers that the key's slot moved
        (:class:`~pglogq.errors.KeyMoved`) the map is read again from that shard and the send is
        made once more where the slot is now; KeyMoved again is raised.  The shard of ``key`` down:
        :class:`~pglogq.errors.ShardUnavailable`, nothing sent.

        ``conn``: the caller's connection, to the shard of the key (:meth:`shard_for`), whose
        transaction the event joins; no routing and no retry: a key that shard does not own raises
        KeyMoved (nothing written; the transaction is in error, roll it back)."""
        a.known_options(AsyncShardedClient.send.__qualname__, options, a.SEND_OPTIONS)
        key, idempotency_key = options.get("key"), options.get("idempotency_key")
        if conn is not None:
            return await self._conn_client.send(queue, payload, conn=conn, **options)
        if key is None:
            for name in await self._unkeyed_order(idempotency_key):
                try:
                    async with self._on(name) as client:
                        return await client.send(queue, payload, **options)  # key None
                except ShardUnavailable as exc:
                    last = exc
            raise last
        _keys.check_key(key)
        m = await self._current()
        shard = m.shard_for_key(key)
        try:
            async with self._on(shard) as client:
                return await client.send(queue, payload, **options)
        except KeyMoved as exc:
            shard = await self._moved(key, shard, exc)
        async with self._on(shard) as client:
            return await client.send(queue, payload, **options)

    async def _unkeyed_order(self, idempotency_key: str | None) -> list[str]:
        """The shards to try for an unkeyed send: the next in turn first, those down last."""
        m = await self._current()
        names = list(m.shard_names)
        if idempotency_key is not None and isinstance(idempotency_key, str):
            return [m.shard_for_slot(_keys.key_slot(idempotency_key))]
        start = next(self._next_send) % len(names)
        names = names[start:] + names[:start]
        return sorted(names, key=self._down.is_down)  # stable: up ones first, in turn

    async def _moved(self, key: str, shard: str, exc: KeyMoved) -> str:
        """Where ``key`` goes after ``shard`` said it moved: the map read again (from ``shard``
        first, which knows the newer map); KeyMoved when the map still says ``shard``."""
        m = await self.refresh_map(prefer=shard)
        owner = m.shard_for_key(key)
        if owner == shard and exc.shard is not None and exc.shard != shard and exc.shard in m.shards:
            owner = exc.shard  # the map read is older than the refusal: trust the refusal
        if owner == shard:
            raise exc
        return owner

    async def send_batch(
        self, queue: str, payloads: Sequence[Any], *, conn: AnyConn | None = None,
        **options: Unpack[SendBatchOptions],
    ) -> list[int]:
        """Append many events, one statement (one transaction) per shard; their ids in order
        (each on its own shard).  ``options``: :meth:`AsyncClient.send_batch`'s
        (:class:`~pglogq.SendBatchOptions`).

        ``keys``: each event goes to the shard of its key; a shard that answers that some moved is
        sent its events again once, after reading the map again (see :meth:`send`).  None: every
        event to the next shard in turn (with ``idempotency_keys``: to the shard of the first
        one's slot, so that a retry of the batch meets its first attempt).  **Not atomic across
        shards**: when a shard is down, the events of the other shards are sent and
        :class:`~pglogq.errors.ShardUnavailable` says how many were not (send those again).

        ``conn``: one statement on the caller's connection, no routing (a key of another shard
        raises KeyMoved and nothing is written)."""
        a.known_options(AsyncShardedClient.send_batch.__qualname__, options, a.SEND_BATCH_OPTIONS)
        if conn is not None:
            return await self._conn_client.send_batch(queue, payloads, conn=conn, **options)
        keys = options.get("keys")
        # the options of every event, passed on with each shard's share of the keys
        common = cast(EventOptions, {k: v for k, v in options.items() if k not in ("keys", "idempotency_keys")})
        events = list(payloads)
        idem = a.idempotency_key_list(options.get("idempotency_keys"))
        if idem is not None and len(idem) != len(events):
            raise InvalidArgument(f"idempotency_keys has {len(idem)} elements, payloads has {len(events)}")
        ev_keys = None if keys is None else _keys.check_keys(keys, len(events))
        m = await self._current()
        if ev_keys is None:
            # with idempotency keys: the shard of the first one's slot, where a retry of the batch goes too
            first_idem = next((k for k in idem or () if isinstance(k, str)), None)
            for name in await self._unkeyed_order(first_idem):
                try:
                    async with self._on(name) as client:
                        return await client.send_batch(queue, events, idempotency_keys=idem, **common)
                except ShardUnavailable as exc:
                    last = exc
            raise last
        ids: list[int | None] = [None] * len(events)
        groups = _group(m, ev_keys, range(len(events)))
        down: list[ShardUnavailable] = []
        for shard, idx in groups.items():
            try:
                await self._send_group(queue, shard, idx, events, ev_keys, idem, common, ids)
            except KeyMoved:
                m = await self.refresh_map(prefer=shard)
                regrouped = _group(m, ev_keys, idx)
                if list(regrouped) == [shard]:
                    raise  # the map read says they are that shard's still
                for again, sub in regrouped.items():
                    try:
                        await self._send_group(queue, again, sub, events, ev_keys, idem, common, ids)
                    except ShardUnavailable as exc2:
                        down.append(exc2)
            except ShardUnavailable as exc:
                down.append(exc)
        if down:
            sent = sum(i is not None for i in ids)
            raise ShardUnavailable(
                f"send_batch sent {sent} of {len(events)} events: " + "; ".join(e.message for e in down),
                hint="the events of the shards that answered are sent: send the others again",
            ) from down[0]
        return [int(i) for i in ids if i is not None]

    async def _send_group(
        self, queue: str, shard: str, idx: list[int], events: list[Any], ev_keys: list[str],
        idem: list[str | None] | None, options: EventOptions, ids: list[int | None],
    ) -> None:
        async with self._on(shard) as client:
            got = await client.send_batch(
                queue, [events[i] for i in idx], keys=[ev_keys[i] for i in idx],
                idempotency_keys=None if idem is None else [idem[i] for i in idx], **options,
            )
        for i, msg_id in zip(idx, got, strict=True):
            ids[i] = msg_id

    # -- consuming ------------------------------------------------------------------------------

    async def receive(
        self,
        queue: str,
        consumer: str,
        *,
        max_messages: int = 100,
        worker: str | None = None,
        start_first: int | None = None,
    ) -> AsyncBatch:
        """The current page of the consumer's batch on one shard (``batch.shard`` names it; its
        ``ack`` and ``nack`` go there).  The shards are asked in turn, from the one after the
        shard of the last page: empty shards, shards that are down and shards where the consumer
        is gated by an unfinished move are passed over, and an empty batch (``shard`` None) comes
        back when none has events.  :class:`~pglogq.errors.ShardUnavailable` when no shard answered.

        A gated shard (a move brought it slots whose events on their old shard this consumer has
        not finished yet): when the consumer has acknowledged everything up to the move's fence
        on the old shard, the gate is passed (``cluster_gate_pass``) and the shard read at once;
        else it is passed over for now (its whole queue waits for this consumer: the cost of
        keeping each key's order across a move)."""
        m = await self._current()
        names = list(m.shard_names)
        turn = (queue, consumer, worker)
        start = self._next_receive.get(turn, 0) % len(names)
        answered = 0
        down: list[str] = []
        left_alone = [n for n in names if self._down.is_down(n)]
        if len(left_alone) == len(names):
            left_alone = []  # every shard failed lately: try them all rather than answer nothing
        for step in range(len(names)):
            pos = (start + step) % len(names)
            name = names[pos]
            if name in left_alone:
                down.append(name)
                continue
            try:
                batch = await self._receive_on(name, queue, consumer, max_messages, worker, start_first)
            except ShardUnavailable:
                down.append(name)
                continue
            answered += 1
            if batch is not None and batch:
                self._next_receive[turn] = pos + 1
                return batch
        if not answered and down:
            raise ShardUnavailable(f"no shard answered receive ({', '.join(down)} down)")
        return AsyncBatch(None, queue, consumer, [], self._conn_client)

    async def _receive_on(
        self, shard: str, queue: str, consumer: str, max_messages: int, worker: str | None, start_first: int | None
    ) -> AsyncBatch | None:
        """The page on ``shard`` (None: gated and the gate cannot be passed yet)."""
        for _ in range(3):  # a gate passed, then maybe the gate of another move
            try:
                async with self._on(shard) as client:
                    batch = await client.receive(queue, consumer, max_messages=max_messages, worker=worker,
                                                 start_first=start_first)
            except ConsumerGated as exc:
                if not await self.pass_gate(queue, consumer, shard, exc):
                    return None
                continue
            batch.shard = shard
            return batch
        return None

    async def pass_gate(self, queue: str, consumer: str, shard: str, gated: ConsumerGated) -> bool:
        """Pass the gate ``gated`` (raised by receive on ``shard``) when ``consumer`` has finished
        the move's old shard up to its fence (``cluster_fence_passed`` there); True when passed
        (receive again), False when not yet (the old shard has work left, is down, or the move
        has no fence yet).  A consumer (or queue) the old shard does not have has nothing to
        finish there: its gate passes."""
        move_id, old, fence = gated.move_id, gated.from_shard, gated.fence
        if move_id is None or old is None:
            return False
        if fence is None:
            return False  # the old shard has not exported yet: its sends go on
        m = await self._current()
        if old not in m.shards and old not in self._clients:
            m = await self.refresh_map(prefer=shard)
            if old not in m.shards and old not in self._clients:
                return False  # the old shard left the map: nobody can tell (an operator's call)
        try:
            try:
                async with self._on(old) as client:
                    passed = await _scalar(client, _FENCE_PASSED, (queue, consumer, fence))
            except (UnknownQueue, UnknownConsumer):
                # the consumer (or its queue) is not on the old shard: it has nothing to finish there
                passed = True
            if not passed:
                return False
            async with self._on(shard) as client:
                await _scalar(client, _GATE_PASS, (queue, consumer, move_id))
        except (ShardUnavailable, ConsumerGated):
            return False
        return True

    async def ack(self, batch: AsyncBatch, *, conn: AnyConn | None = None) -> bool:
        """Acknowledge ``batch`` on its shard (the same as ``batch.ack()``)."""
        if not isinstance(batch, AsyncBatch):
            raise InvalidArgument(f"ack takes a received batch, got {batch.__class__.__name__}")
        if batch.id is None or batch.shard is None:
            return await batch.ack(conn=conn)
        async with self._on(batch.shard):
            return await batch.ack(conn=conn)

    async def nack(
        self,
        batch: AsyncBatch,
        msg: Message,
        *,
        retry_after: timedelta | None = None,
        reason: str | None = None,
        dead: bool = False,
        conn: AnyConn | None = None,
    ) -> str:
        """Fail ``msg`` of ``batch`` on the batch's shard (the same as ``batch.nack(msg)``)."""
        if not isinstance(batch, AsyncBatch) or batch.shard is None:
            raise InvalidArgument("nack takes the batch a message came in (from ShardedClient.receive)")
        async with self._on(batch.shard):
            return await batch.nack(msg, retry_after=retry_after, reason=reason, dead=dead, conn=conn)

    # -- monitoring -----------------------------------------------------------------------------

    async def queue_info(self, queue: str | None = None) -> list[ShardedQueueInfo]:
        """One row per queue (``queue``, or all), combined over the shards; each row's ``shards``
        holds every shard's own row, None for a shard that is down (left out of the figures).
        :class:`~pglogq.errors.ShardUnavailable` when no shard answered."""
        per = await self._per_shard("queue_info", queue)
        by_name: dict[str, dict[str, QueueInfo | None]] = {}
        for shard, rows in per.items():
            for row in rows or ():
                by_name.setdefault(row.queue_name, {})[shard] = row
        out = []
        for name, rows in by_name.items():
            full: dict[str, QueueInfo | None] = {s: rows.get(s) for s in per}
            out.append(_sharding.combine_queue_info(name, full))
        return sorted(out, key=lambda r: r.queue_name)

    async def consumer_info(self, queue: str | None = None, consumer: str | None = None) -> list[ShardedConsumerInfo]:
        """One row per consumer (of ``queue``, or named ``consumer``; None: all), combined over
        the shards like :meth:`queue_info`."""
        per = await self._per_shard("consumer_info", queue, consumer)
        by_name: dict[tuple[str, str], dict[str, ConsumerInfo | None]] = {}
        for shard, rows in per.items():
            for row in rows or ():
                by_name.setdefault((row.queue_name, row.consumer_name), {})[shard] = row
        out = []
        for (q, c), rows in by_name.items():
            full: dict[str, ConsumerInfo | None] = {s: rows.get(s) for s in per}
            out.append(_sharding.combine_consumer_info(q, c, full))
        return sorted(out, key=lambda r: (r.queue_name, r.consumer_name))

    async def _per_shard(self, method: str, *args: Any) -> dict[str, Any]:
        """``method``'s answer of every shard (None for a shard that is down); ShardUnavailable
        when none answered."""
        m = await self._current()
        got: dict[str, Any] = {}
        errors: list[str] = []
        for name in m.shard_names:
            try:
                async with self._on(name) as client:
                    got[name] = await getattr(client, method)(*args)
            except ShardUnavailable as exc:
                got[name] = None
                errors.append(exc.message)
        if len(errors) == len(got):
            raise ShardUnavailable(f"no shard answered {method}: " + "; ".join(errors))
        return got


def _group(m: ShardMap, keys: list[str], idx: Sequence[int]) -> dict[str, list[int]]:
    """The positions ``idx`` of ``keys`` by the shard that owns each key, in order."""
    out: dict[str, list[int]] = {}
    for i in idx:
        out.setdefault(m.shard_for_key(keys[i]), []).append(i)
    return out


def _connect_options(dsn: str, timeout: float) -> dict[str, Any]:
    """A connect_timeout for a seed's one-off connection, unless its DSN sets one."""
    return {} if "connect_timeout" in conninfo_to_dict(dsn) else {"connect_timeout": max(2, round(timeout))}


async def _read_map(conn: AnyConn) -> ShardMap:
    try:
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(_CLUSTER_MAP, prepare=False)
            row = await cur.fetchone()
    except psycopg.Error as exc:
        err = translate(exc)
        if isinstance(err, PglogqError):
            raise err from exc
        raise
    assert row is not None
    return ShardMap.from_json(row[0])


async def _scalar(client: AsyncClient, sql: LiteralString, params: Sequence[Any]) -> Any:
    try:
        async with client.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params, prepare=False)
            row = await cur.fetchone()
    except psycopg.Error as exc:
        err = translate(exc)
        if isinstance(err, PglogqError):
            raise err from exc
        raise
    return None if row is None else row[0]
