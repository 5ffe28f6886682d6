"""Sharding: one queue across several PostgreSQL servers, a layer built on the core of pglogq.

- ``shardmap.py``: the shard map (which shard owns which hash slot; no I/O);
- ``sharded_client_async.py`` / ``sharded_client.py``: the client of a cluster (asyncio, and its
  generated blocking twin), one :class:`~pglogq.AsyncClient` per shard;
- ``sharded_consumer_async.py`` / ``sharded_consumer.py``: a consumer given a sharded client
  runs ordinary receive loops on every shard, through them;
- ``cluster_admin.py``: the orchestrator of ``pglogq cluster`` (init, status, move slots, add and
  remove shards);
- ``_sharding.py``: what the two sharded clients share.

The core (every module of ``pglogq`` outside this package) never imports it; ``pglogq`` itself
re-exports :class:`ShardedClient`, :class:`AsyncShardedClient` and :class:`ShardMap`.
"""

from pglogq.cluster.sharded_client import ShardedClient
from pglogq.cluster.sharded_client_async import AsyncShardedClient
from pglogq.cluster.shardmap import ShardMap

__all__ = ["AsyncShardedClient", "ShardMap", "ShardedClient"]
