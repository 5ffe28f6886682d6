"""The ``sharded`` chaos mode: one queue across three PostgreSQL servers.

``python -m tests.harness.chaos --mode sharded --seed N --duration S`` starts three embedded
servers (:mod:`tests.support.servers`; shard ``i`` pinned to core ``i % cores``), makes them one
cluster (``cluster_admin.init``: 16,384 slots in three contiguous ranges), creates the queue on
every shard (``ShardedClient.create_queue``, 4 partitions each) and subscribes ``c1`` (one
process) and ``c3`` (three cooperating worker processes) to it.  Then it runs:

* producers ``p1`` .. ``p3`` (:mod:`.sharded_producer`): keyed sends through a ShardedClient
  (``send``, ``send_batch``, ``send(conn=)`` in an application transaction on the shard of the
  key, unkeyed sends), every attempt recorded ok / fail / info;
* consumers (:mod:`.sharded_consumer`): a :class:`pglogq.Consumer` over a ShardedClient, one
  loop per shard, recording every delivery before its acknowledgement;
* one ticker daemon per shard;

and injects, on the seed's schedule (:data:`.nemesis.OWN_INTERVAL`): slot moves
(``cluster_admin.move_slots`` of a range holding a producer's key to another shard, so the same
keys go back and forth), an immediate stop of one shard's server (restarted 0.5-2 s later; at
least one per run), SIGKILL of consumers, producers and tickers (restarted).  At the end the
producers stop, every shard is drained, and the checker (:mod:`.checker`, plus
:func:`duplicates`) reports per subscriber: lost, unexpected, duplicates not explained by a crash
(a delivery again with the same retry count although neither its consumer process nor its
shard died in between), per-key order violations and one key in flight at two workers: all 0.
The sends the servers refused because a key had moved (PQ078, ``key_moved_refusal``) are
counted with the faults.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.harness.chaos import nemesis
from tests.harness.chaos.checker import check, client_faults, record_pid
from tests.harness.chaos.harness import BEHIND, DEAD_INTERVAL_S, QUEUE_CONFIG, Proc, ticker_command
from tests.harness.chaos.history import Recorder, is_poison, read_file
from tests.support.servers import ExtraServer, start_servers, stop_servers

QUEUE = "chaos"
SHARDS = 3
PARTITIONS = 4
PRODUCERS = ("p1", "p2", "p3")
KEYS_PER_PRODUCER = 8
SUBSCRIBERS = ("c1", "c3")
COOP = "c3"
WORKERS = ("w1", "w2", "w3")
MOVE_WIDTHS = (0, 40, 400)  # slots on either side of the chosen key's slot
SHARDED_CONFIG = {"retry_delay": "100 ms"}
"""On a partitioned queue a nacked event holds its partition back until it is delivered again
(strict order): a shorter retry delay than the other modes' keeps the consumers near the head."""
C1_WORKERS = 2  # receive loops per shard of the c1 process (c3: one per worker process)


@dataclass
class Move:
    lo: int
    hi: int
    from_shard: str
    to_shard: str
    seconds: float
    ok: bool
    error: str = ""


@dataclass
class ShardedHarness:
    seed: int
    duration: float
    keep: bool = False
    verbose: bool = True
    settle_moves: float = 0.0  # before a move, wait up to this long until no consumer is gated
    producing: bool = True
    run_end: float = math.inf  # when the faults end (monotonic): no move waits for gates past it
    moves_due: list[float] = field(default_factory=list)  # deferred moves (settle_moves): when due
    last_gate_check: float = 0.0
    gates_left: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    procs: list[Proc] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    crashes: list[dict[str, Any]] = field(default_factory=list)
    cursor_max: dict[str, int] = field(default_factory=dict)
    regressions: list[str] = field(default_factory=list)

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[chaos {time.monotonic() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    # -- setup --------------------------------------------------------------------------------

    def setup(self) -> None:
        self.t0 = time.monotonic()
        self.base = Path(tempfile.mkdtemp(prefix="pglogq-chaos-sharded-"))
        self.base.chmod(0o755)
        self.hist = self.base / "history"
        self.hist.mkdir()
        self.events = Recorder(self.hist / "nemesis-harness.log")  # crashes and kills, with their times
        self.shards: list[ExtraServer] = start_servers(SHARDS, self.base / "shards", pin=True)
        self.names = [s.name for s in self.shards]
        from pglogq.cluster import cluster_admin
        from pglogq.cluster.sharded_client import ShardedClient

        cluster_admin.init([s.dsn for s in self.shards], names=self.names)
        with ShardedClient([self.shards[0].dsn]) as client:
            client.create_queue(QUEUE, partitions=PARTITIONS)
            for k, v in {**QUEUE_CONFIG, **SHARDED_CONFIG}.items():
                client.set_queue_config(QUEUE, k, v)
            for c in SUBSCRIBERS:
                client.subscribe(QUEUE, c)
        self.rng = random.Random(self.seed)
        seeds = [a for s in self.shards for a in ("--seed-dsn", s.dsn)]
        common = [*seeds, "--queue", QUEUE, "--dir", str(self.hist)]
        for i, p in enumerate(PRODUCERS):
            self.procs.append(Proc("producer", p, ["tests.harness.chaos.sharded_producer", *common, "--name", p,
                                                   "--keys", str(KEYS_PER_PRODUCER),
                                                   "--seed", str(self.seed * 100 + i)]))
        self.procs.append(Proc("consumer", "c1", ["tests.harness.chaos.sharded_consumer", *common,
                                                  "--consumer", "c1", "--workers", str(C1_WORKERS),
                                                  "--seed", str(self.seed * 100 + 20)]))
        for i, w in enumerate(WORKERS):
            self.procs.append(Proc("consumer", f"{COOP}-{w}", [
                "tests.harness.chaos.sharded_consumer", *common, "--consumer", COOP, "--worker", w,
                "--seed", str(self.seed * 100 + 30 + i)]))
        for s in self.shards:
            self.procs.append(Proc("ticker", f"ticker-{s.name}", ticker_command(s.dsn)))
        for proc in self.procs:
            proc.start(self.base)
        self.log(f"{SHARDS} shards on ports {', '.join(str(s.port) for s in self.shards)} (cores "
                 f"{', '.join(str(s.cpu) for s in self.shards)}), history in {self.hist}")

    # -- the run ------------------------------------------------------------------------------

    def run_faults(self) -> None:
        plan = nemesis.schedule(self.seed, self.duration, "sharded")
        restarts: list[tuple[float, Proc]] = []
        start = time.monotonic()
        self.run_end = start + self.duration
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
            self.revive(restarts)
            self.settle_pending()
            time.sleep(0.05)
        for _, pending in restarts:
            pending.start(self.base)
        if self.moves_due:
            self.faults["move_not_made"] += len(self.moves_due)  # still waiting at the end

    def revive(self, pending: list[tuple[float, Proc]]) -> None:
        """Restart, as a supervisor would, a process that exited by itself (an error: counted)."""
        waiting = {id(p) for _, p in pending}
        for p in self.procs:
            if p.role == "producer" and not self.producing:
                continue
            if p.popen is not None and p.popen.poll() is not None and id(p) not in waiting:
                self.faults[f"exited_{p.role}"] += 1
                self.log(f"{p.name} exited ({p.popen.returncode}): restarted")
                p.restarts += 1
                p.start(self.base)

    def sample_cursors(self) -> None:
        """Committed cursors and tick ids of every shard never go back, crashes included."""
        for s in self.shards:
            try:
                with psycopg.connect(s.dsn, autocommit=True, connect_timeout=2) as conn:
                    rows = conn.execute(
                        "SELECT consumer_name || coalesce('/' || stream, ''), last_tick FROM pglogq.subscription"
                        " WHERE parent_id IS NULL UNION ALL SELECT '<tick>', max(tick_id) FROM pglogq.tick"
                    ).fetchall()
            except psycopg.Error:
                continue  # the shard is down right now
            for name, value in rows:
                if value is None:
                    continue
                label = f"{s.name}:{name}"
                if value < self.cursor_max.get(label, 0):
                    self.regressions.append(f"{label}: {self.cursor_max[label]} -> {value}")
                self.cursor_max[label] = max(value, self.cursor_max.get(label, 0))

    def inject(self, kind: str, now: float, restarts: list[tuple[float, Proc]]) -> None:
        rng = self.rng
        if kind in ("kill_consumer", "kill_producer", "kill_ticker"):
            role = kind.split("_", 1)[1]
            victims = [p for p in self.procs if p.role == role and p.alive()]
            if not victims:
                return
            victim = rng.choice(victims)
            assert victim.popen is not None
            pid = victim.popen.pid
            victim.kill()
            self.events.write("kill", victim.name, pid, f"{time.monotonic():.6f}")
            victim.restarts += 1
            restarts.append((now + (rng.uniform(1, 4) if role == "ticker" else rng.uniform(0.2, 2)), victim))
        elif kind == "shard_crash":
            self.crash(rng.choice(self.shards), rng.uniform(0.5, 2.0))
        elif kind == "move_slots":
            if self.settle_moves > 0:
                # deferred (see settle_pending): the loop goes on restarting processes meanwhile
                self.moves_due.append(time.monotonic())
            else:
                self.move()
        self.faults[kind] += 1
        self.log(f"fault {kind}")

    def crash(self, shard: ExtraServer, down: float) -> None:
        t_down = time.monotonic()
        shard.crash()
        time.sleep(down)
        shard.start()
        t_up = time.monotonic()
        self.events.write("crash", shard.name, f"{t_down:.6f}", f"{t_up:.6f}")
        self.crashes.append({"shard": shard.name, "down_s": round(t_up - t_down, 2)})
        self.log(f"shard {shard.name} crashed and restarted ({t_up - t_down:.1f} s down)")

    def cluster_map(self) -> dict[str, Any]:
        for s in self.shards:
            with contextlib.suppress(psycopg.Error), psycopg.connect(s.dsn, autocommit=True, connect_timeout=3) as conn:
                row = conn.execute("SELECT pglogq.cluster_map()").fetchone()
                assert row is not None
                result: dict[str, Any] = row[0]
                return result
        raise RuntimeError("no shard answered cluster_map()")

    def settle_pending(self) -> None:
        """Try the oldest deferred move again (every 0.5 s): one the orchestrator refused because
        consumers were still gated on its source (GatesPending), or, with ``settle_moves``, one
        waiting up to that long until no consumer is gated anywhere."""
        if not self.moves_due:
            return
        now = time.monotonic()
        if now - self.last_gate_check < 0.5:
            return
        self.last_gate_check = now
        if (self.settle_moves > 0 and now - self.moves_due[0] < self.settle_moves and now < self.run_end
                and self.gates()):
            return
        self.moves_due.pop(0)
        self.move()

    def gates(self) -> int:
        """Gate rows left on every shard that answers (consumers not yet past a move's fence)."""
        n = 0
        for s in self.shards:
            with contextlib.suppress(psycopg.Error), psycopg.connect(s.dsn, autocommit=True, connect_timeout=3) as conn:
                row = conn.execute("SELECT count(*) FROM pglogq.cluster_gate").fetchone()
                n += int(row[0]) if row else 0
        return n

    def gate_rows(self) -> list[str]:
        """Every gate row left: ``shard: consumer gated by move N (from shard, fence)``."""
        out: list[str] = []
        for s in self.shards:
            with contextlib.suppress(psycopg.Error), psycopg.connect(s.dsn, autocommit=True, connect_timeout=3) as conn:
                for consumer, move_id, src, fences in conn.execute(
                    "SELECT s.consumer_name, g.move_id, m.from_shard, m.fences FROM pglogq.cluster_gate g"
                    " JOIN pglogq.subscription s ON s.sub_id = g.sub_id"
                    " JOIN pglogq.cluster_move m ON m.move_id = g.move_id ORDER BY 2, 1").fetchall():
                    out.append(f"{s.name}: {consumer} gated by move {move_id} (from {src}, fences {fences})")
        return out

    def move(self) -> None:
        """Move the slots around one producer key's slot (within the range that holds it) to
        another shard: the keys of the run go back and forth between the shards."""
        from pglogq.cluster import cluster_admin
        from pglogq.errors import GatesPending
        from pglogq.keys import key_slot

        rng = self.rng
        key = f"{rng.choice(PRODUCERS)}:{rng.randrange(KEYS_PER_PRODUCER)}"
        slot = key_slot(key)
        cmap = self.cluster_map()
        owner = next(r for r in cmap["ranges"] if r["lo"] <= slot <= r["hi"])
        width = rng.choice(MOVE_WIDTHS)
        lo, hi = max(owner["lo"], slot - width), min(owner["hi"], slot + width)
        target = rng.choice([n for n in self.names if n != owner["shard"]])
        t = time.monotonic()
        try:
            cluster_admin.move_slots(self.shards[0].dsn, lo, hi, target)
        except GatesPending as exc:  # nothing changed: tried again later (settle_pending)
            self.moves_due.append(time.monotonic())
            self.faults["move_deferred"] += 1
            self.log(f"move {lo}-{hi} -> {target} deferred: {exc}")
            return
        except Exception as exc:  # recorded: a failed move is a finding, the run goes on
            self.moves.append(Move(lo, hi, owner["shard"], target, round(time.monotonic() - t, 3), False,
                                   f"{type(exc).__name__}: {exc}"))
            self.log(f"move {lo}-{hi} -> {target} failed: {exc}")
            return
        self.moves.append(Move(lo, hi, owner["shard"], target, round(time.monotonic() - t, 3), True))
        self.log(f"moved slots {lo}-{hi} ({key}) {owner['shard']} -> {target}")

    # -- stop, drain, check -------------------------------------------------------------------

    def stop_producers(self) -> None:
        self.producing = False
        for p in self.procs:
            if p.role == "producer":
                p.terminate(20)
        for p in self.procs:
            if p.role != "producer" and not p.alive():
                p.start(self.base)

    def finish_moves(self) -> list[dict[str, Any]]:
        """Unfinished moves left by a failure: resumed (``move_slots(seed, resume=True)``); those
        still unfinished after that."""
        from pglogq.cluster import cluster_admin

        if unfinished(self.cluster_map()):
            try:
                cluster_admin.move_slots(self.shards[0].dsn, resume=True)
            except Exception as exc:
                self.log(f"resume of the unfinished moves: {exc}")
        return unfinished(self.cluster_map())

    def drained_shard(self, conn: psycopg.Connection[Any]) -> bool:
        """One drain step on one shard: force a tick, wait until every consumer is past it with
        nothing open, pending or gated, and nothing was appended meanwhile."""
        for op, q in conn.execute("SELECT op, queue_name FROM pglogq.maint_operations()").fetchall():
            if op == "pump":
                conn.execute("SELECT pglogq.maint_run(%s, %s)", (op, q))
        before = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        tick = conn.execute("SELECT pglogq.force_tick(%s)", (QUEUE,)).fetchone()
        assert tick is not None and before is not None
        gates = conn.execute("SELECT to_regclass('pglogq.cluster_gate') IS NOT NULL").fetchone()
        gate_sql = "(SELECT count(*) FROM pglogq.cluster_gate)" if gates and gates[0] else "0"
        end = time.monotonic() + 30
        while time.monotonic() < end:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM pglogq.subscription WHERE batch_id IS NOT NULL),"
                f" ({BEHIND}),"
                " (SELECT count(*) FROM pglogq.retry) + (SELECT count(*) FROM pglogq.delayed),"
                " (SELECT count(*) FROM pglogq.event), " + gate_sql,
                (tick[0],),
            ).fetchone()
            assert row is not None
            if row[0] == 0 and row[1] == 0:
                return bool(row[2] == 0 and row[3] == before[0] and row[4] == 0)
            self.revive([])
            time.sleep(0.2)
        return False

    def drain(self, timeout: float) -> bool:
        """Every shard drained in one pass (each checked after the others were)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            done = 0
            for s in self.shards:
                try:
                    with psycopg.connect(s.dsn, autocommit=True) as conn:
                        done += self.drained_shard(conn)
                except psycopg.Error as exc:
                    self.log(f"drain {s.name}: {exc}")
            if done == len(self.shards):
                return True
            time.sleep(0.3)
        return False

    def dead_letters(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for s in self.shards:
            with psycopg.connect(s.dsn, autocommit=True) as conn:
                for consumer, ev in conn.execute(
                    "SELECT s.consumer_name, d.ev_payload->>'id' FROM pglogq.dead_letter d"
                    " JOIN pglogq.subscription s ON s.sub_id = d.sub_id"
                ).fetchall():
                    out.setdefault(consumer, set()).add(ev)
        return out

    def run(self) -> dict[str, Any]:
        try:
            self.setup()
            self.run_faults()
            self.log("stopping producers")
            self.stop_producers()
            left = self.finish_moves()
            self.log("draining")
            drained = self.drain(timeout=180.0)
            self.log(f"drained: {drained}")
            self.sample_cursors()
            dead = self.dead_letters()
            final_map = self.cluster_map()
            self.gates_left = self.gate_rows()
            for p in self.procs:
                p.terminate(20)
            return self.report(drained, dead, final_map, left)
        finally:
            self.teardown()

    def report(self, drained: bool, dead: dict[str, set[str]], final_map: dict[str, Any],
               left: list[dict[str, Any]]) -> dict[str, Any]:
        from tests.harness.chaos.checker import read_sends

        sends = read_sends(self.hist)
        poison = {i for i in sends.invoked if is_poison(i)}
        report = check(self.hist, list(SUBSCRIBERS), dead, poison, set(), dead_interval=DEAD_INTERVAL_S)
        dups = duplicates(self.hist)
        for sub, s in report["subscribers"].items():
            d = dups.get(sub, {"explained": [], "unexplained": []})
            s["duplicates_explained_by_a_crash"] = len(d["explained"])
            s["duplicates"] = len(d["unexplained"])
            s["examples"]["duplicates"] = d["unexplained"][:10]
        faults = Counter(self.faults)
        faults.update(client_faults(self.hist))
        moves_ok = [m for m in self.moves if m.ok]
        report.update(
            seed=self.seed,
            mode="sharded",
            partitions=PARTITIONS,
            shards={s.name: {"port": s.port, "cpu": s.cpu, "crashes": s.crashes} for s in self.shards},
            duration_s=self.duration,
            wall_s=round(time.monotonic() - self.t0, 1),
            drained=drained,
            faults=dict(sorted(faults.items())),
            restarts={p.name: p.restarts for p in self.procs if p.restarts},
            cursor_regressions=self.regressions,
            moves_done=len(moves_ok),
            moves_failed=len(self.moves) - len(moves_ok),
            moves=[vars(m) for m in self.moves],
            moves_unfinished=left,
            settle_moves_s=self.settle_moves,
            gates_left=self.gates_left,
            crashes=self.crashes,
            map_version=final_map.get("version"),
            keys_moved=len({k for k in all_keys() if any(m.lo <= _slot(k) <= m.hi for m in moves_ok)}),
        )
        report["passed"] = (
            drained and not self.regressions and not left and report["moves_failed"] == 0
            and bool(self.crashes) and all(
                s["lost"] == 0 and s["unexpected"] == 0 and s["duplicates"] == 0
                and s["per_key_order_violations"] == 0 and s["same_key_in_flight"] == 0
                and s["poison_not_dead"] == 0
                for s in report["subscribers"].values()))
        if not report["passed"]:
            self.keep = True
        report["history_dir"] = str(self.hist) if self.keep else None
        return report

    def teardown(self) -> None:
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.kill()
        if hasattr(self, "shards"):
            stop_servers(self.shards)
        if hasattr(self, "base") and not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)


def unfinished(cmap: dict[str, Any]) -> list[dict[str, Any]]:
    """The moves of a map (``cluster_map()``) that are not done."""
    return [m for m in cmap.get("moves") or [] if m.get("state") != "done"]


def all_keys() -> list[str]:
    return [f"{p}:{k}" for p in PRODUCERS for k in range(KEYS_PER_PRODUCER)]


def _slot(key: str) -> int:
    from pglogq.keys import key_slot

    return key_slot(key)


@dataclass
class Delivery:
    at: float  # the handler's start (monotonic)
    retry: int
    pid: str  # the consumer process that got it


def read_harness_events(directory: Path) -> tuple[list[tuple[float, float]], dict[str, float]]:
    """(crash windows (down, up), pid -> when the harness killed it) of ``nemesis-harness.log``."""
    crashes: list[tuple[float, float]] = []
    kills: dict[str, float] = {}
    path = directory / "nemesis-harness.log"
    if path.exists():
        for rec in read_file(path):
            if rec[0] == "crash" and len(rec) == 4:
                crashes.append((float(rec[2]), float(rec[3])))
            elif rec[0] == "kill" and len(rec) == 4:
                kills[rec[2]] = float(rec[3])
    return crashes, kills


def duplicates(directory: Path) -> dict[str, dict[str, list[str]]]:
    """subscriber → {"explained": ids, "unexplained": ids}: ids delivered again with the same
    retry count.  A repeat is explained when, between the two deliveries, a shard's server
    crashed (the acknowledgement may have been lost with it) or the process that got the first
    one was killed (before its acknowledgement); any other is a duplicate the engine made."""
    crashes, kills = read_harness_events(directory)
    got: dict[str, dict[str, list[Delivery]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(directory.glob("consumer-*.log")):
        pid = record_pid(path.stem[len("consumer-"):]) or ""
        pages: dict[str, float] = {}
        for rec in read_file(path):
            if rec[0] == "page":
                pages[rec[1]] = float(rec[5])
            elif rec[0] == "deliver" and len(rec) == 9:
                got[rec[3]][rec[1]].append(Delivery(pages.get(rec[6], 0.0), int(rec[5]), pid))
    out: dict[str, dict[str, list[str]]] = {}
    for sub, ids in got.items():
        explained: list[str] = []
        unexplained: list[str] = []
        for ev, ds in ids.items():
            by_retry: dict[int, list[Delivery]] = defaultdict(list)
            for d in ds:
                by_retry[d.retry].append(d)
            repeats = [
                any(a.at <= down <= b.at for down, _ in crashes) or (a.pid in kills and a.at <= kills[a.pid] <= b.at)
                for same in by_retry.values()
                for a, b in itertools.pairwise(sorted(same, key=lambda d: d.at))
            ]
            if not all(repeats):
                unexplained.append(ev)
            elif repeats:
                explained.append(ev)
        out[sub] = {"explained": sorted(explained), "unexplained": sorted(unexplained)}
    return out

