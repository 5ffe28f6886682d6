"""A cluster of shards for the tests: databases of the test server joined by the orchestrator
(``pglogq.cluster_admin.init``), and ways to reach into each shard or take one down."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from pglogq.keys import SLOTS
from pglogq.shardmap import ShardMap, redacted


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
    admin().init(list(dsns.values()), names=list(dsns))
    return Cluster(dsns, server_dsn)


def admin() -> Any:
    """The orchestrator: pglogq.cluster_admin, or the stand-in below while it does not exist."""
    try:
        return importlib.import_module("pglogq.cluster_admin")
    except ImportError:
        return _StandIn


class _StandIn:
    """The steps of the orchestrator, plainly (no resume, no checks): init and move_slots."""

    @staticmethod
    def init(dsns: list[str], names: list[str]) -> None:
        size = SLOTS // len(dsns)
        ranges = [{"lo": i * size, "hi": SLOTS - 1 if i == len(dsns) - 1 else (i + 1) * size - 1, "shard": n}
                  for i, n in enumerate(names)]
        stored = [{"name": n, "dsn": redacted(d)} for n, d in zip(names, dsns, strict=True)]
        doc = {"version": 1, "shards": stored, "ranges": ranges}
        for n, d in zip(names, dsns, strict=True):
            with psycopg.connect(d, autocommit=True) as conn:
                conn.execute("SELECT pglogq.cluster_join('test', %s, %s)", (n, Jsonb(doc)))

    @staticmethod
    def move_slots(seed: str, lo: int, hi: int, to_shard: str) -> None:
        with psycopg.connect(seed) as conn:
            row = conn.execute("SELECT pglogq.cluster_map()").fetchone()
            assert row is not None
        m = ShardMap.from_json(row[0])
        source = m.shard_for_slot(lo)
        v = m.version + 1
        move = {"move_id": v, "map_version": v, "slot_lo": lo, "slot_hi": hi, "from_shard": source,
                "to_shard": to_shard}
        dsn = {n: m.dsn(n, seed) for n in m.shard_names}

        def one(name: str, sql: Any, *args: Any) -> Any:
            with psycopg.connect(dsn[name], autocommit=True) as conn:
                got = conn.execute(sql, args).fetchone()
                return None if got is None else got[0]

        one(to_shard, "SELECT pglogq.cluster_import(%s)", Jsonb(move))
        one(source, "SELECT pglogq.cluster_export(%s)", Jsonb(move))
        fences = one(source, "SELECT pglogq.cluster_fence(%s)", v)
        one(to_shard, "SELECT pglogq.cluster_finish_move(%s, %s)", v, Jsonb(fences))
        one(source, "SELECT pglogq.cluster_finish_move(%s, %s)", v, Jsonb(fences))
        new = ShardMap.from_json(one(to_shard, "SELECT pglogq.cluster_map()"))
        doc = {"version": new.version, "shards": [{"name": n, "dsn": new.shards[n]} for n in new.shard_names],
               "ranges": [{"lo": r.lo, "hi": r.hi, "shard": r.shard} for r in new.ranges]}
        for name in m.shard_names:
            if name not in (source, to_shard):
                one(name, "SELECT pglogq.cluster_apply(%s)", Jsonb(doc))
