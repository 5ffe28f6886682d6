"""Redis Streams: XADD / XREADGROUP / XACK against a redis-server that the bench starts itself
(on a free port, its AOF in a temporary directory of the machine's disk; ``appendonly yes``) and
stops at the end -- the machine's own Redis, if any, is not used.  Two rows:

- ``Redis Streams``: ``appendfsync everysec`` (Redis' default for AOF): the AOF is fsynced once a
  second, so an acknowledged XADD is **not** durable per write (up to ~1 s of them can be lost by a
  machine crash);
- ``Redis Streams (appendfsync always)``: set with ``CONFIG SET appendfsync always`` for the run and
  restored (in a ``finally``) before the server stops: the AOF is written and fsynced before the
  replies go out, so an acknowledged XADD is durable -- the durable-to-durable comparison.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, ClassVar

from tests.harness.bench import payload
from tests.harness.bench.pacing import clock, paced, wait_until
from tests.harness.bench.systems.base import Record, System

STREAM = "bench:produce"
DRAIN = "bench:drain"


def _client(conf: dict[str, Any]) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=conf["port"])


def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    r = _client(conf)
    body = payload.encoded(idx)
    n = 0
    wait_until(start_at)
    while time.time() < stop_at:
        if mode == "single":
            r.xadd(STREAM, {"p": body})
            n += 1
        else:
            pipe = r.pipeline(transaction=False)
            for _ in range(batch):
                pipe.xadd(STREAM, {"p": body})
            pipe.execute()
            n += batch
    r.close()
    return n


def xadd_paced(conf: dict[str, Any], rate: int, seconds: float, start_at: float) -> list[tuple[int, float]]:
    r = _client(conf)

    def send(seqs: list[int]) -> None:
        pipe = r.pipeline(transaction=False)
        for s in seqs:
            pipe.xadd(conf["stream"], {"p": payload.encoded(s)})
        pipe.execute()

    try:
        return paced(rate, seconds, send, start_at=start_at)
    finally:
        r.close()


def read_group(conf: dict[str, Any], stream: str, group: str, consumer: str, start_at: float,
               block_ms: int | None = None, expected: int | None = None, deadline: float | None = None,
               record: Record | None = None) -> tuple[int, float, float]:
    """XREADGROUP COUNT 1000, decode each payload, XACK the page; until empty (or expected)."""
    r = _client(conf)
    n = 0
    wait_until(start_at)
    start = time.time()
    while True:
        if expected is not None and (n >= expected or time.time() > (deadline or 0)):
            break
        resp = r.xreadgroup(group, consumer, {stream: ">"}, count=1000, block=block_ms)
        if not resp:
            if block_ms is None:
                break
            continue
        entries = resp[0][1]
        now = clock()
        ids = []
        for eid, fields in entries:
            body = json.loads(fields[b"p"])
            if record is not None:
                record(int(body["seq"]), now)
            ids.append(eid)
        r.xack(stream, group, *ids)
        n += len(ids)
    end = time.time()
    r.close()
    return n, start, end


def group_worker(conf: dict[str, Any], idx: int, start_at: float) -> tuple[int, float, float]:
    return read_group(conf, DRAIN, "g", f"c{idx}", start_at)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisStreams(System):
    name: ClassVar[str] = "Redis Streams"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch")
    produce_worker = staticmethod(produce)
    latency_producer = staticmethod(xadd_paced)
    appendfsync: ClassVar[str] = "everysec"
    durable: ClassVar[bool] = False
    durability: ClassVar[str] = ("NOT durable per write: appendonly yes, appendfsync everysec -- the AOF is "
                                 "fsynced once a second, an acknowledged XADD can be lost in a machine crash")

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.dir = ""
        self._version = ""
        self._restore: str | None = None
        self._config: dict[str, Any] = {}

    def unavailable(self) -> str | None:
        try:
            import redis  # noqa: F401
        except ImportError:
            return "the redis Python package is not installed (pip install -e '.[peers]')"
        if not shutil.which("redis-server"):
            return "no redis-server binary on this machine"
        return None

    def setup(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="pglogq-bench-redis-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        r = _client(self.conf())
        for _ in range(100):
            try:
                r.ping()
                break
            except Exception:
                time.sleep(0.05)
        try:
            info = r.info("server")
            self._version = str(info.get("redis_version", ""))
            aof = r.config_get("appendonly").get("appendonly")
            if aof != "yes":
                raise RuntimeError(f"redis-server runs with appendonly={aof!r}: it would keep nothing on disk")
            old = r.config_get("appendfsync").get("appendfsync")
            if old != self.appendfsync:
                r.config_set("appendfsync", self.appendfsync)
                self._restore = old
            self._config = {k: r.config_get(k).get(k) for k in ("appendonly", "appendfsync", "dir")}
        finally:
            r.close()

    def teardown(self) -> None:
        try:
            if self._restore is not None and self.proc is not None:
                r = _client(self.conf())
                try:
                    r.config_set("appendfsync", self._restore)
                finally:
                    r.close()
                self._restore = None
        finally:
            self._stop_server()

    def _stop_server(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def conf(self) -> dict[str, Any]:
        return {"port": self.port, "stream": STREAM}

    def version(self) -> str:
        return f"redis-server {self._version} ({', '.join(f'{k} {v}' for k, v in self._config.items())})"

    def client(self) -> Any:
        return _client(self.conf())

    def preload(self, n: int) -> None:
        r = self.client()
        r.delete(DRAIN)
        body = [payload.encoded(i) for i in range(1000)]
        for start in range(0, n, 1000):
            pipe = r.pipeline(transaction=False)
            for b in body[: min(1000, n - start)]:
                pipe.xadd(DRAIN, {"p": b})
            pipe.execute()
        r.xgroup_create(DRAIN, "g", id="0")
        r.close()

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        if workers == 1:
            count, start, end = read_group(self.conf(), DRAIN, "g", "c0", 0.0)
            return count, end - start
        pool = self.ctx.pool()
        start_at = time.time() + 0.5
        futures = [pool.submit(group_worker, self.conf(), i, start_at) for i in range(workers)]
        parts = [f.result() for f in futures]
        return sum(p[0] for p in parts), max(p[2] for p in parts) - start_at

    def latency_setup(self, rate: int) -> None:
        self._lat_stream = f"bench:lat:{rate}"
        r = self.client()
        r.xgroup_create(self._lat_stream, "g", id="$", mkstream=True)
        r.close()

    def latency_conf(self) -> dict[str, Any]:
        return {"port": self.port, "stream": self._lat_stream}

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        ready.set()
        read_group(self.latency_conf(), self._lat_stream, "g", "lat", 0.0, block_ms=200,
                   expected=expected, deadline=deadline, record=record)

    def memory_usage(self, key: str) -> int:
        r = self.client()
        try:
            return int(r.memory_usage(key, samples=0) or 0)
        finally:
            r.close()


class RedisStreamsFsyncAlways(RedisStreams):
    """The same, with ``appendfsync always``: durable per write, like a PostgreSQL commit."""

    name: ClassVar[str] = "Redis Streams (appendfsync always)"
    key: ClassVar[str] = "redis-always"
    appendfsync: ClassVar[str] = "always"
    durable: ClassVar[bool] = True
    durability: ClassVar[str] = ("durable per write: appendonly yes, appendfsync always (CONFIG SET for the run, "
                                 "restored after) -- the AOF is fsynced before the replies are sent (one fsync "
                                 "per event-loop pass, so a pipelined batch shares one)")
