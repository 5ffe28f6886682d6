"""The chaos run: set up, inject faults on the seed's schedule, stop, drain, check.

The ``keyed`` mode runs the same faults on a queue of ``partitions`` partitions (4 by default):
the producers send keyed events (:mod:`.producer`, ``--keys``), the cooperating consumer has
three workers, and every consumer records its pages, so that the checker also counts per-key
order violations and one key in flight at two workers at once (:mod:`.checker`).

The ``share`` mode runs them with ``c3`` a share consumer (``subscribe(..., share => true)``)
served by three worker processes, each of whose receives takes a lease of the next events no
other worker holds; every consumer records its pages, and the checker counts one event in flight
at two workers at once.  It adds a fault of its own, ``kill_share_holder``: a share worker that
holds a lease is stopped (SIGSTOP), its lease confirmed in the database, then SIGKILLed and
brought back under a new name, so that another worker must take the lease over after
``dead_interval``; and schema re-installs while leases are out.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.harness import child_env
from tests.harness.chaos import nemesis
from tests.harness.chaos.checker import check, client_faults
from tests.harness.chaos.consumer import EFFECT_DDL
from tests.harness.chaos.history import Recorder, is_killer, is_poison
from tests.harness.chaos.proxy import FaultyProxy
from tests.harness.chaos.server import ChaosServer, free_port

QUEUE = "chaos"
PLAIN_CONSUMERS = ("c1", "c2")
COOP_CONSUMER = "c3"
COOP_WORKERS = ("w1", "w2")
KEYED_WORKERS = ("w1", "w2", "w3")  # the keyed mode: three workers share the partitions
SHARE_WORKERS = ("w1", "w2", "w3")  # the share mode: three workers of the share consumer c3
PRODUCERS = ("p1", "p2", "p3")
KEYS_PER_PRODUCER = 8  # keyed mode: producer p sends to keys p:0 .. p:7
KEYED_PARTITIONS = 4  # keyed mode: the default number of partitions
DEAD_INTERVAL_S = 3.0

BEHIND = (
    # the holders behind tick %s that still have something to read: every consumer's own cursor,
    # and a partition's stream only while it is marked (a stream with nothing to read keeps its
    # cursor where it last read: see pglogq._stream_skip); the urgent lane's stream always
    "SELECT count(*) FROM pglogq.subscription s WHERE s.last_tick < %s"
    " AND (s.parent_id IS NULL OR s.stream < 0 OR (s.stream >= 0 AND EXISTS"
    "   (SELECT 1 FROM pglogq.stream_mark m WHERE m.consumer_id = s.parent_id AND m.stream = s.stream)))"
)
"""Counted by a drain step: it is over when this is 0 (and nothing is open or pending)."""
QUEUE_CONFIG = {
    "ticker_max_lag": "0",
    "max_retries": "2",
    "retry_delay": "200 ms",
    "dead_interval": f"{DEAD_INTERVAL_S:g} s",
    "batch_max_events": "3000",
    "big_batch_events": "1000",
}


@dataclass
class Proc:
    """A client process the harness started (and may kill and restart)."""

    role: str
    name: str
    args: list[str]
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    def start(self, log: Path) -> None:
        with open(log / f"stderr-{self.name}.txt", "ab") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", *self.args], stdout=subprocess.DEVNULL, stderr=err, env=child_env()
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self, record: Recorder | None = None) -> None:
        """SIGKILL, recorded (``kill <name> <pid> <time>``) when ``record`` is given: a page the
        process had not finished is in flight no longer than that (:mod:`.checker`)."""
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
            if record is not None:
                record.write("kill", self.name, self.popen.pid, f"{time.monotonic():.6f}")

    def terminate(self, timeout: float) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        os.kill(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


def ticker_command(dsn: str) -> list[str]:
    """The ``pglogq-ticker`` daemon (``python -m pglogq.tickerd``)."""
    return ["pglogq.tickerd", "--dsn", dsn, "--log-level", "WARNING", "--max-backoff", "1s"]


@dataclass
class Harness:
    seed: int
    duration: float
    mode: str | None = None  # None, or a key of nemesis.MODE_INTERVAL ("retention", "keyed")
    partitions: int = 1  # the queue's partitions (keyed mode: KEYED_PARTITIONS unless told)
    out: Path | None = None
    keep: bool = False
    verbose: bool = True
    faults: Counter[str] = field(default_factory=Counter)
    procs: list[Proc] = field(default_factory=list)
    twins: list[tuple[float, Proc]] = field(default_factory=list)
    worker_names: int = 0
    plan: list[tuple[float, str]] = field(default_factory=list)
    holder_retries: int = 30  # share mode: kill_share_holder tried again 1 s later until a lease is left behind
    cursor_max: dict[str, int] = field(default_factory=dict)
    regressions: list[str] = field(default_factory=list)

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[chaos {time.monotonic() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    # -- setup --------------------------------------------------------------------------------

    def setup(self) -> None:
        self.t0 = time.monotonic()
        self.base = Path(tempfile.mkdtemp(prefix="pglogq-chaos-"))
        self.hist = self.base / "history"
        self.hist.mkdir()
        os.chmod(self.base, 0o755)
        self.server = ChaosServer(self.base / "srv")
        self.server.setup()
        import pglogq

        with pglogq.Client(self.server.dsn) as client:
            client.install_schema()
        with pglogq.Client(self.server.dsn) as client:
            client.create_queue(QUEUE, partitions=self.partitions)
            for k, v in QUEUE_CONFIG.items():
                client.set_queue_config(QUEUE, k, v)
            for c in PLAIN_CONSUMERS:
                client.subscribe(QUEUE, c)
            client.subscribe(QUEUE, COOP_CONSUMER, share=self.share)
        if self.share:
            with psycopg.connect(self.server.dsn, autocommit=True) as conn:
                conn.execute(EFFECT_DDL)
        self.proxy = FaultyProxy(free_port(), self.server.port, seed=self.seed)
        self.proxy.start_in_thread()
        self.client_dsn = (
            f"host=127.0.0.1 port={self.proxy.listen_port} user=postgres dbname=postgres"
            " connect_timeout=3 sslmode=disable gssencmode=disable"
            " options='-c statement_timeout=30000'"
        )
        self.rng = random.Random(self.seed)
        self.nemesis = nemesis.Nemesis(
            self.server.dsn, QUEUE, random.Random(self.seed + 1), Recorder(self.hist / "producer-2pc.log")
        )
        self.skips = Recorder(self.hist / "retention-harness.log")
        self.kills = Recorder(self.hist / "nemesis-harness.log")
        d = self.client_dsn
        common = ["--dsn", d, "--queue", QUEUE, "--dir", str(self.hist)]
        keys = ["--keys", str(KEYS_PER_PRODUCER)] if self.keyed else []
        for i, p in enumerate(PRODUCERS):
            self.procs.append(Proc("producer", p, ["tests.harness.chaos.producer", *common, "--name", p, *keys,
                                                   "--seed", str(self.seed * 100 + i)]))
        self.procs.append(Proc("producer", "rr", ["tests.harness.chaos.producer", *common, "--name", "rr",
                                                  "--rr", *keys, "--seed", str(self.seed * 100 + 9)]))
        for i, c in enumerate(PLAIN_CONSUMERS):
            self.procs.append(Proc("consumer", c, ["tests.harness.chaos.consumer", *common, "--consumer", c,
                                                   *self.consumer_flags(), "--seed", str(self.seed * 100 + 20 + i)]))
        for i, w in enumerate(self.workers):
            self.procs.append(self.worker_proc(w, self.seed * 100 + 30 + i))
        self.procs.append(Proc("ticker", "ticker", ticker_command(d)))
        for proc in self.procs:
            proc.start(self.base)
        self.log(f"server on 127.0.0.1:{self.server.port}, proxy on {self.proxy.listen_port}, "
                 f"ticker {ticker_command(d)[0]}, history in {self.hist}")

    @property
    def keyed(self) -> bool:
        return self.mode == "keyed"

    @property
    def share(self) -> bool:
        return self.mode == "share"

    @property
    def workers(self) -> tuple[str, ...]:
        """The cooperating (or share) consumer's first worker names."""
        return KEYED_WORKERS if self.keyed else SHARE_WORKERS if self.share else COOP_WORKERS

    def consumer_flags(self) -> list[str]:
        # before "--seed": a twin's arguments are the original's without its last two
        return ["--keyed"] if self.keyed else ["--share"] if self.share else []

    def worker_proc(self, worker: str, seed: int) -> Proc:
        common = ["--dsn", self.client_dsn, "--queue", QUEUE, "--dir", str(self.hist)]
        return Proc("consumer", f"{COOP_CONSUMER}-{worker}",
                    ["tests.harness.chaos.consumer", *common, "--consumer", COOP_CONSUMER,
                     "--worker", worker, *self.consumer_flags(), "--seed", str(seed)])

    # -- the run ------------------------------------------------------------------------------

    def run_faults(self) -> None:
        plan = nemesis.schedule(self.seed, self.duration, self.mode)
        self.plan = plan
        restarts: list[tuple[float, Proc]] = []
        start = time.monotonic()
        last_sample = 0.0
        while True:
            now = time.monotonic() - start
            if now >= self.duration:
                break
            if now - last_sample >= 1.0:
                self.sample_cursors()
                last_sample = now
            while plan and plan[0][0] <= now:
                _, kind = plan.pop(0)
                self.inject(kind, now, restarts)
            for due, proc in list(restarts):
                if due <= now:
                    restarts.remove((due, proc))
                    proc.start(self.base)
            self.revive_killed()
            for due, proc in list(self.twins):
                if due <= now:
                    proc.kill(self.kills)
            try:
                self.nemesis.settle(now)
            except psycopg.Error as exc:
                self.log(f"settle: {exc}")
            time.sleep(0.05)
        for _, pending in restarts:
            pending.start(self.base)

    def revive_killed(self) -> None:
        """Restart, as a supervisor would, the consumers a killer event made exit (code 3)."""
        for p in self.procs:
            if p.role == "consumer" and p.popen is not None and p.popen.poll() == 3:
                p.restarts += 1
                self.faults["killer_crash"] += 1
                p.start(self.base)

    def sample_cursors(self) -> None:
        """Committed cursors and tick ids never go back, crashes included (checklist 9)."""
        try:
            with psycopg.connect(self.server.dsn, autocommit=True, connect_timeout=2) as conn:
                rows = conn.execute(
                    "SELECT consumer_name, last_tick FROM pglogq.subscription WHERE parent_id IS NULL"
                    " UNION ALL SELECT '<tick>', max(tick_id) FROM pglogq.tick"
                ).fetchall()
        except psycopg.Error:
            return  # the server is down right now
        for name, value in rows:
            if value is None:
                continue
            if value < self.cursor_max.get(name, 0):
                self.regressions.append(f"{name}: {self.cursor_max[name]} -> {value}")
            self.cursor_max[name] = max(value, self.cursor_max.get(name, 0))

    def inject(self, kind: str, now: float, restarts: list[tuple[float, Proc]]) -> None:
        rng = self.rng
        if kind in ("kill_consumer", "kill_producer", "kill_ticker"):
            role = kind.split("_", 1)[1]
            victims = [p for p in self.procs if p.role == role and p.alive()]
            if not victims:
                return
            victim = rng.choice(victims)
            victim.kill(self.kills)
            delay = rng.uniform(1, 5) if role == "ticker" else rng.uniform(0.2, 2)
            if victim.name.startswith(COOP_CONSUMER + "-") and rng.random() < 0.3:
                # come back under a new worker name: the old batch must be taken over
                self.procs.remove(victim)
                self.worker_names += 1
                victim = self.worker_proc(f"w{self.worker_names + len(self.workers)}", rng.randrange(10**9))
                self.procs.append(victim)
                self.faults["worker_renamed"] += 1
            victim.restarts += 1
            restarts.append((now + delay, victim))
        elif kind == "kill_share_holder":
            self.kill_share_holder(now, restarts)
        elif kind == "server_crash":
            self.server.crash()
            self.nemesis.drop_connections()
            time.sleep(rng.uniform(0.5, 2))
            self.server.start()
        elif kind == "forced_rotation":
            try:
                if nemesis.rotate(self.server.dsn, QUEUE):
                    self.faults["rotation_done"] += 1
            except psycopg.Error as exc:
                self.log(f"rotation: {exc}")
        elif kind == "held_rr_snapshot":
            try:
                self.nemesis.hold_snapshot(now)
            except psycopg.Error as exc:
                self.log(f"snapshot: {exc}")
        elif kind == "prepared_transaction":
            self.nemesis.prepare(now)
        elif kind == "twin_consumer":
            # a second process under the same consumer (or worker) name, for a few seconds: the
            # two share one cursor; neither may acknowledge a page it did not receive
            live = [p for p in self.procs if p.role == "consumer" and p.alive()]
            if not live:
                return
            orig = rng.choice(live)
            twin = Proc("twin", f"{orig.name}-twin{len(self.twins)}",
                        [*orig.args[:-2], "--seed", str(rng.randrange(10**9)),
                         "--tag", f"{orig.name}-twin{len(self.twins)}"])
            twin.start(self.base)
            self.twins.append((now + rng.uniform(2, 6), twin))
        elif kind == "proxy_partition":
            self.proxy.partition(rng.uniform(0.5, 3))
        elif kind == "retention_pass":
            try:
                if nemesis.retention_pass(self.server.dsn, QUEUE, nemesis.RETENTION_LIMIT, self.skips):
                    self.faults["retention_moved"] += 1
            except psycopg.Error as exc:
                self.log(f"retention: {exc}")
        elif kind == "reinstall_schema":
            try:
                nemesis.reinstall_schema(self.server.dsn)
            except Exception as exc:  # pglogq.PglogqError or psycopg.Error: the server may be down
                self.log(f"reinstall: {exc}")
        self.faults[kind] += 1
        self.log(f"fault {kind}")

    def share_holders(self) -> set[str]:
        """The workers of the share consumer that hold a lease now (read on the server itself)."""
        with psycopg.connect(self.server.dsn, autocommit=True, connect_timeout=2) as conn:
            return {str(r[0]) for r in conn.execute(
                "SELECT w.worker_name FROM pglogq.subscription w JOIN pglogq.subscription c"
                " ON c.sub_id = w.parent_id WHERE c.consumer_name = %s AND w.batch_id IS NOT NULL",
                (COOP_CONSUMER,)).fetchall()}

    def kill_share_holder(self, now: float, restarts: list[tuple[float, Proc]]) -> None:
        """Kill a share worker while it holds a lease, and bring it back under a new name: its
        lease must be taken over by another worker (after dead_interval), each event of it
        handled, none by two live workers at once.  The worker is stopped first (SIGSTOP) and
        its lease read from the database a moment later, when nothing it sent can still
        commit, so that the SIGKILL surely leaves a lease behind (``share_lease_orphaned``);
        a worker without a lease is let go on (SIGCONT) and the next holder is tried.  Until one
        kill has left a lease behind, an attempt that found none is tried again a second later
        (at most ``holder_retries`` times in a run): the run must have had one."""
        if not self._kill_share_holder(now, restarts) and not self.faults["share_lease_orphaned"] \
                and self.holder_retries > 0 and now + 1.0 < self.duration:
            self.holder_retries -= 1
            bisect.insort(self.plan, (now + 1.0, "kill_share_holder"))

    def _kill_share_holder(self, now: float, restarts: list[tuple[float, Proc]]) -> bool:
        rng = self.rng
        prefix = COOP_CONSUMER + "-"
        for _ in range(5):
            try:
                holders = self.share_holders()
            except psycopg.Error as exc:
                self.log(f"share holders: {exc}")
                return False
            live = [p for p in self.procs if p.role == "consumer" and p.name.startswith(prefix) and p.alive()
                    and p.name[len(prefix):] in holders]
            if not live:
                self.faults["kill_share_holder_none"] += 1
                return False
            victim = rng.choice(live)
            assert victim.popen is not None
            os.kill(victim.popen.pid, signal.SIGSTOP)
            time.sleep(0.3)  # a statement already sent commits (or not) meanwhile
            try:
                still = victim.name[len(prefix):] in self.share_holders()
            except psycopg.Error:
                still = False
            if not still:
                os.kill(victim.popen.pid, signal.SIGCONT)
                continue
            victim.kill(self.kills)
            self.faults["share_lease_orphaned"] += 1
            self.procs.remove(victim)
            self.worker_names += 1
            fresh = self.worker_proc(f"w{self.worker_names + len(self.workers)}", rng.randrange(10**9))
            fresh.restarts = victim.restarts + 1
            self.procs.append(fresh)
            restarts.append((now + rng.uniform(0.2, 2), fresh))
            return True
        return False

    # -- stop, drain, check -------------------------------------------------------------------

    def stop_producers(self) -> None:
        self.proxy.enabled = False
        for _, twin in self.twins:
            twin.kill(self.kills)
        for p in self.procs:
            if p.role == "producer":
                p.terminate(20)
        end = time.monotonic() + 60
        while self.nemesis.prepared or self.nemesis.held:
            self.nemesis.settle(time.monotonic(), everything=True)
            if time.monotonic() > end:
                raise RuntimeError("prepared transactions could not be finished")
            time.sleep(0.2)
        for p in self.procs:
            if p.role != "producer" and not p.alive():
                p.start(self.base)

    def drain(self, timeout: float) -> bool:
        """Tick until every consumer has everything: no open batch, no pending retry, at the
        last tick, and no event appended since that tick was taken.  On a partitioned queue
        every stream must be at the last tick (the consumer's own cursor may stay behind: see
        :meth:`cursors_behind_streams`)."""
        end = time.monotonic() + timeout
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            while time.monotonic() < end:
                for op, q in conn.execute("SELECT op, queue_name FROM pglogq.maint_operations()").fetchall():
                    if op == "pump":
                        conn.execute("SELECT pglogq.maint_run(%s, %s)", (op, q))
                before = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
                tick = conn.execute("SELECT pglogq.force_tick(%s)", (QUEUE,)).fetchone()
                assert tick is not None
                caught_up = False
                row: tuple[Any, ...] | None = None
                wait_end = time.monotonic() + 30
                while time.monotonic() < wait_end:
                    row = conn.execute(
                        "SELECT (SELECT count(*) FROM pglogq.subscription WHERE batch_id IS NOT NULL),"
                        f" ({BEHIND}),"
                        " (SELECT count(*) FROM pglogq.retry) + (SELECT count(*) FROM pglogq.delayed),"
                        " (SELECT count(*) FROM pglogq.event)",
                        (tick[0],),
                    ).fetchone()
                    assert row is not None
                    if row[0] == 0 and row[1] == 0:
                        caught_up = True
                        break
                    self.revive_killed()
                    time.sleep(0.2)
                if caught_up and row is not None and row[2] == 0 and before is not None and row[3] == before[0]:
                    return True
                time.sleep(0.3)
        return False

    def cursors_behind_streams(self) -> dict[str, list[int]]:
        """Consumers of a partitioned queue whose cursor is behind the slowest of their streams
        once everything is drained: consumer → [its cursor, its slowest stream's]."""
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            return {str(n): [int(c), int(m)] for n, c, m in conn.execute(
                "SELECT s.consumer_name, s.last_tick, min(x.last_tick) FROM pglogq.subscription s"
                " JOIN pglogq.subscription x ON x.parent_id = s.sub_id AND x.stream >= 0"
                " WHERE s.parent_id IS NULL GROUP BY s.sub_id, s.consumer_name, s.last_tick"
                " HAVING s.last_tick < min(x.last_tick) ORDER BY 1").fetchall()}

    def dead_letters(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            for consumer, ev in conn.execute(
                "SELECT s.consumer_name, d.ev_payload->>'id' FROM pglogq.dead_letter d"
                " JOIN pglogq.subscription s ON s.sub_id = d.sub_id"
            ).fetchall():
                out.setdefault(consumer, set()).add(ev)
        return out

    def effects(self) -> dict[str, Counter[str]]:
        """Share mode: the effects each consumer's acks committed (chaos_effect), per event."""
        out: dict[str, Counter[str]] = {}
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            for consumer, ev, n in conn.execute(
                "SELECT consumer, msg_id, count(*) FROM chaos_effect GROUP BY 1, 2"
            ).fetchall():
                out.setdefault(consumer, Counter())[ev] = int(n)
        return out

    def skipped_events(self) -> dict[str, int]:
        """What retention says it made each consumer skip (consumer_info.skipped_events)."""
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            return {str(n): int(k) for n, k in conn.execute(
                "SELECT consumer_name, skipped_events FROM pglogq.consumer_info(%s)", (QUEUE,)).fetchall()}

    def run(self) -> dict[str, Any]:
        try:
            self.setup()
            self.run_faults()
            self.log("stopping producers")
            self.stop_producers()
            self.log("draining")
            drained = self.drain(timeout=180.0)
            self.log(f"drained: {drained}")
            self.sample_cursors()
            dead = self.dead_letters()
            effects = self.effects() if self.share else None
            behind = self.cursors_behind_streams()
            skipped_db = self.skipped_events()
            for p in self.procs:
                p.terminate(20)
            invoked = _all_invoked(self.hist)
            poison = {i for i in invoked if is_poison(i)}
            killers = {i for i in invoked if is_killer(i)}
            report = check(self.hist, [*PLAIN_CONSUMERS, COOP_CONSUMER], dead, poison - killers, killers,
                           dead_interval=DEAD_INTERVAL_S, effects=effects)
            faults = Counter(self.faults)
            faults.update(self.proxy.counts)
            faults.update(client_faults(self.hist))
            report.update(
                seed=self.seed,
                mode=self.mode or "plain",
                partitions=self.partitions,
                skipped_events=skipped_db,
                duration_s=self.duration,
                wall_s=round(time.monotonic() - self.t0, 1),
                drained=drained,
                faults=dict(sorted(faults.items())),
                restarts={p.name: p.restarts for p in self.procs if p.restarts},
                cursor_regressions=self.regressions,
                consumer_cursor_behind_streams=behind,
            )
            report["passed"] = drained and not self.regressions and not behind and all(
                s["lost"] == 0 and s["unexpected"] == 0 and s["skipped_within_limit"] == 0
                and s["per_key_order_violations"] == 0 and s["same_key_in_flight"] == 0
                and s["same_event_in_flight"] == 0
                and s.get("effects_applied_twice", 0) == 0 and s.get("done_without_effect", 0) == 0
                for s in report["subscribers"].values()
            )
            if not report["passed"]:
                self.keep = True
            report["history_dir"] = str(self.hist) if self.keep else None
            return report
        finally:
            self.teardown()

    def teardown(self) -> None:
        for p in [*self.procs, *(t for _, t in self.twins)]:
            with contextlib.suppress(Exception):
                p.kill()
        if hasattr(self, "proxy"):
            self.proxy.stop()
        if hasattr(self, "server"):
            self.server.stop()
        if hasattr(self, "base") and not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)


def _all_invoked(directory: Path) -> set[str]:
    from tests.harness.chaos.checker import read_sends

    return read_sends(directory).invoked


def write_report(report: dict[str, Any], out: Path | None) -> None:
    text = json.dumps(report, indent=2, sort_keys=True)
    if out is not None:
        out.write_text(text + "\n")
    print(text)
