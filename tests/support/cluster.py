"""A cluster of shards for the tests: databases of the test server joined by the orchestrator
(``pglogq.cluster.cluster_admin.init``), and ways to reach into each shard or take one down."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pglogq.cluster import cluster_admin
from pglogq.cluster.shardmap import ShardMap


@dataclass
class Cluster:
    """``dsns[name]`` the DSN of each shard (a database of the test server), in map order."""

    dsns: dict[str, str]
    server_dsn: str

    @property
    def names(self) -> list[str]:
        return list(self.dsns)

    @property
    def seeds(self) -> list[str]:
        return list(self.dsns.values())

    def read_map(self, name: str | None = None) -> ShardMap:
        with psycopg.connect(self.dsns[name or self.names[0]]) as conn:
            row = conn.execute("SELECT pglogq.cluster_map()").fetchone()
            assert row is not None
            return ShardMap.from_json(row[0])

    def keys_of(self, name: str, n: int, prefix: str = "k") -> list[str]:
        """``n`` keys whose slots ``name`` owns under the current map."""
        m = self.read_map()
        out: list[str] = []
        i = 0
        while len(out) < n:
            key = f"{prefix}{i}"
            if m.shard_for_key(key) == name:
                out.append(key)
            i += 1
        return out

    def events(self, name: str, queue: str) -> list[tuple[str | None, object]]:
        """(key, payload) of every event of ``queue`` stored on shard ``name``, by id."""
        with psycopg.connect(self.dsns[name]) as conn:
            rows = conn.execute(
                "SELECT e.ev_key, e.ev_payload FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
                " WHERE q.queue_name = %s ORDER BY e.ev_id", (queue,),
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def dbname(self, name: str) -> str:
        return str(conninfo_to_dict(self.dsns[name])["dbname"])

    @contextlib.contextmanager
    def down(self, name: str) -> Iterator[None]:
        """Shard ``name`` unreachable while inside: its database refuses connections and every
        session on it is terminated; it takes connections again afterwards."""
        db = self.dbname(name)
        with psycopg.connect(self.server_dsn, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,))
        try:
            yield
        finally:
            with psycopg.connect(self.server_dsn, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')


def make_cluster(new_db: Callable[[], str], server_dsn: str, n: int = 3) -> Cluster:
    """``n`` fresh databases made shards "s0".."s<n-1>" of cluster "test" (map version 1)."""
    dsns = {f"s{i}": new_db() for i in range(n)}
    cluster_admin.init(list(dsns.values()), names=list(dsns))
    return Cluster(dsns, server_dsn)
