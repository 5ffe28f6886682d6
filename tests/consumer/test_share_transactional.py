"""A transactional share consumer: each handler slot runs its lease in a transaction of its own,
on the handler's connection (``msg.conn``), and the event's outcome (ack, or nack: a release with
a delay) commits with the handler's writes or not at all.

The handler writes the event's effect (a row of ``effect``) and then passes two gates the test
can close (advisory locks, see tests/support/consumers.py): one after the write, before COMMIT,
and one inside the COMMIT (a deferred trigger).  A closed gate holds a slot's transaction open
for as long as the test wants (never a sleep); the test then cuts the connection
(``pg_terminate_backend``) or kills the worker process there.  Whatever the point, the event is
either done with its effect or available again without it: its effect is applied exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import (
    EFFECT_DDL,
    EFFECT_INSERT,
    HANDLER_GATE,
    MODES,
    Spec,
    run_once,
    running,
)
from tests.support.paths import REPO
from tests.support.waiting import wait_for


class Effects:
    """The handler: the event's effect in its transaction, then (type 'held') the handler gate;
    type 'fail' writes, then raises Nack (its write is rolled back to the handler's savepoint, the
    event is released for a retry); type 'reject' the same with ``dead=True`` (a dead letter at
    once, its retries left unused).  Every call is recorded (msg_id, retry_count)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.lock = threading.Lock()
        self.calls: list[tuple[int, int]] = []

    def __call__(self, msg: Any) -> Any:
        with self.lock:
            self.calls.append((msg.msg_id, msg.retry_count))
        if self.mode == "asyncio":
            return self._async(msg)
        msg.conn.execute(EFFECT_INSERT, (msg.msg_id, msg.worker, msg.retry_count))
        if msg.type == "held":
            msg.conn.execute(HANDLER_GATE)
        if msg.type == "fail":
            raise pglogq.Nack("failed on purpose", retry_after=3600)
        if msg.type == "reject":
            raise pglogq.Nack("cannot ever succeed", dead=True)
        return None

    async def _async(self, msg: Any) -> None:
        await msg.conn.execute(EFFECT_INSERT, (msg.msg_id, msg.worker, msg.retry_count))
        if msg.type == "held":
            await msg.conn.execute(HANDLER_GATE)
        if msg.type == "fail":
            raise pglogq.Nack("failed on purpose", retry_after=3600)
        if msg.type == "reject":
            raise pglogq.Nack("cannot ever succeed", dead=True)


def prepare(client: pglogq.Client, dsn: str) -> psycopg.Connection[Any]:
    """A share consumer 'c' of queue 'q', the effect table; the test's connection (autocommit),
    which closes the gates."""
    client.create_queue("q")
    client.subscribe("q", "c", share=True)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(EFFECT_DDL)
    return conn


def spec_for(dsn: str, effects: Effects, **kwargs: Any) -> Spec:
    spec = Spec(dsn, "q", "c", kwargs=dict({"poll_interval": 0.2, "heartbeat_interval": 0.2, "share": True,
                                            "transactional": True}, **kwargs))
    spec.handler()(effects)
    return spec


def effects_of(conn: psycopg.Connection[Any], msg_id: int) -> int:
    row = conn.execute("SELECT count(*) FROM effect WHERE msg_id = %s", (msg_id,)).fetchone()
    assert row is not None
    return int(row[0])


def waiting_at(conn: psycopg.Connection[Any], gate: int) -> int | None:
    """The backend waiting at ``gate`` (1: the handler's, 2: the COMMIT's), or None."""
    row = conn.execute(
        "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.objid = %s AND NOT l.granted",
        (gate,),
    ).fetchone()
    return None if row is None else int(row[0])


def backend_gone(conn: psycopg.Connection[Any], pid: int) -> bool:
    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (0,)


def state_of(client: pglogq.Client, msg_id: int) -> str:
    return next(j.state for j in client.lookup("q", msg_id) if j.consumer == "c")


@pytest.mark.parametrize("mode", MODES)
def test_slots_commit_their_outcomes_with_their_writes(mode: str, client: pglogq.Client, dsn: str) -> None:
    # two slots, each with its own transaction: one is held open at the handler gate (its write
    # not visible) while the other commits event after event; a failed event's write is rolled
    # back, and its release (a nack with a delay) commits with the rest
    gate = prepare(client, dsn)
    effects = Effects(mode)
    gate.execute("SELECT pg_advisory_lock(1)")
    try:
        held = client.send("q", {}, type="held")
        client.tick("q", force=True)
        with running(mode, spec_for(dsn, effects, concurrency=2)) as r:
            wait_for(lambda: waiting_at(gate, 1) is not None, "a slot held at the handler gate", timeout=60)
            ok = client.send_batch("q", [{"n": i} for i in range(20)], type="ok")
            failed = client.send_batch("q", [{"n": i} for i in range(3)], type="fail")
            client.tick("q", force=True)
            wait_for(lambda: all(state_of(client, m) == "done" for m in ok), "the ok events done", timeout=60)
            wait_for(lambda: all(state_of(client, m) == "retry" for m in failed), "the failed ones released",
                     timeout=60)
            assert effects_of(gate, held) == 0 and state_of(client, held) == "in-flight"  # still open
            gate.execute("SELECT pg_advisory_unlock(1)")
            wait_for(lambda: state_of(client, held) == "done", "the held event done", timeout=60)
            r.stop()
            stats = r.join()
    finally:
        gate.execute("SELECT pg_advisory_unlock_all()")
    assert stats.handled == 21 and stats.retried == 3
    for m in [held, *ok]:
        assert effects_of(gate, m) == 1
    for m in failed:
        assert effects_of(gate, m) == 0  # rolled back to the handler's savepoint
    gate.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("gate_no", [1, 2], ids=["before-commit", "during-commit"])
def test_a_connection_cut_leaves_the_event_available_without_its_effect(
    mode: str, gate_no: int, client: pglogq.Client, dsn: str
) -> None:
    # the slot's connection is cut while its transaction waits at a gate (before COMMIT, or in
    # it): nothing of it commits, and the slot receives its lease again (a crash counted) and
    # handles it once more: one effect in all
    gate = prepare(client, dsn)
    effects = Effects(mode)
    gate.execute("SELECT pg_advisory_lock(%s)", (gate_no,))
    try:
        msg = client.send("q", {}, type="held")
        client.tick("q", force=True)
        with running(mode, spec_for(dsn, effects, concurrency=2)) as r:
            wait_for(lambda: waiting_at(gate, gate_no) is not None, "the slot waiting at the gate", timeout=60)
            pid = waiting_at(gate, gate_no)
            assert pid is not None
            gate.execute("SELECT pg_terminate_backend(%s)", (pid,))
            wait_for(lambda: backend_gone(gate, pid), "the cut backend gone", timeout=60)
            assert effects_of(gate, msg) == 0 and state_of(client, msg) == "in-flight"
            gate.execute("SELECT pg_advisory_unlock(%s)", (gate_no,))
            wait_for(lambda: state_of(client, msg) == "done", "the event done again", timeout=60)
            r.stop()
            r.join()
    finally:
        gate.execute("SELECT pg_advisory_unlock_all()")
    assert effects_of(gate, msg) == 1
    assert [c for c in effects.calls if c[0] == msg] == [(msg, 0), (msg, 1)]  # the cut counted a crash
    gate.close()


# -- the worker process killed -----------------------------------------------------------------


class Worker:
    def __init__(self, dsn: str, tmp: Path, name: str) -> None:
        self.log_path = tmp / f"worker-{name}.log"
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", T_QUEUE="q", T_CONSUMER="c",
                   T_WORKER=name, T_SLOTS="2")
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pglogq.worker", "--dsn", dsn, "tests.support.consumers:make_tx_share_worker"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(60)
        self._log.close()


@pytest.mark.parametrize("when", ["before-commit", "during-commit", "after-commit"])
def test_a_killed_worker_applies_each_effect_once(
    when: str, client: pglogq.Client, dsn: str, tmp_path: Path
) -> None:
    # the worker process is SIGKILLed with its slot's transaction at the handler gate (before
    # COMMIT), in the COMMIT (the gate of the deferred trigger), or after it committed; then the
    # gate opens.  The event is either done with its effect or available again without it; a
    # worker started after the holder's dead_interval finishes what is left: one effect in all
    gate = prepare(client, dsn)
    client.set_queue_config("q", "dead_interval", "1 second")
    gate_no = {"before-commit": 1, "during-commit": 2, "after-commit": None}[when]
    if gate_no is not None:
        gate.execute("SELECT pg_advisory_lock(%s)", (gate_no,))
    msg = client.send("q", {}, type="ok")
    client.tick("q", force=True)
    w = Worker(dsn, tmp_path, "k")
    try:
        if gate_no is not None:
            wait_for(lambda: waiting_at(gate, gate_no) is not None, "the slot waiting at the gate", timeout=60)
            pid = waiting_at(gate, gate_no)
        else:
            wait_for(lambda: effects_of(gate, msg) == 1, "the effect committed", timeout=60)
            pid = None
        w.proc.send_signal(signal.SIGKILL)
        w.proc.wait(60)
        gate.execute("SELECT pg_advisory_unlock_all()")
        if pid is not None:
            wait_for(lambda: backend_gone(gate, pid), "the killed worker's backend gone", timeout=60)
    finally:
        w.close()
    # settled: done with its effect, or in flight (the dead worker's lease) without it
    state = state_of(client, msg)
    assert (state, effects_of(gate, msg)) in {("done", 1), ("in-flight", 0)}
    if when == "before-commit":
        assert state == "in-flight"  # the COMMIT was never sent
    elif when == "after-commit":
        assert state == "done"
    # the next worker takes over what the dead one left (after its dead_interval), once
    effects = Effects("thread")
    spec = spec_for(dsn, effects, worker="next")
    wait_for(lambda: (run_once("thread", spec, stop_when_idle=True), state_of(client, msg))[1] == "done",
             "the event done by the next worker", timeout=60)
    assert effects_of(gate, msg) == 1
    assert len(effects.calls) == (1 if state == "in-flight" else 0)
    gate.close()


@pytest.mark.parametrize("mode", MODES)
def test_transactional_slots_need_share_and_a_connection_each(mode: str, dsn: str) -> None:
    cls: Any = pglogq.Consumer if mode == "thread" else pglogq.AsyncConsumer
    for kwargs in ({"concurrency": 2}, {"workers": 2}, {"concurrency": 2, "share": False}):
        with pytest.raises(ValueError, match=r"share consumer \(share=True\) runs a transaction per handler slot"):
            cls(dsn, "q", "c", transactional=True, **kwargs)
    cls(dsn, "q", "c", transactional=True, share=True, workers=2, concurrency=3)
    client_cls: Any = pglogq.Client if mode == "thread" else pglogq.AsyncClient
    small = client_cls(dsn, max_size=6)
    with pytest.raises(ValueError, match=r"\(6 at once\).*max_size >= 7 \(this one has 6\)"):
        cls(small, "q", "c", transactional=True, share=True, workers=2, concurrency=3)
    cls(client_cls(dsn, max_size=7), "q", "c", transactional=True, share=True, workers=2, concurrency=3)


@pytest.mark.parametrize("mode", MODES)
def test_a_seek_that_ends_a_slots_lease_rolls_its_effects_back(mode: str, client: pglogq.Client, dsn: str) -> None:
    # a slot's transaction is held open after the handler's write; an operator seeks the share
    # consumer back (force): the lease ends, the slot's ack is refused when the handler returns,
    # so its transaction rolls back with the write; the event is handed out again and done once
    gate = prepare(client, dsn)
    effects = Effects(mode)
    t0 = client.seek_plan("q", "c", to="latest").target_tick
    gate.execute("SELECT pg_advisory_lock(1)")
    try:
        msg = client.send("q", {}, type="held")
        client.tick("q", force=True)
        with running(mode, spec_for(dsn, effects, concurrency=2)) as r:
            wait_for(lambda: waiting_at(gate, 1) is not None, "the slot held at the handler gate", timeout=60)
            plan = client.seek("q", "c", to=t0, force=True)
            assert plan.open_batches == 1  # the held slot's lease
            gate.execute("SELECT pg_advisory_unlock(1)")
            wait_for(lambda: len(effects.calls) == 2 and state_of(client, msg) == "done", "the event done again",
                     timeout=60)
            r.stop()
            stats = r.join()
    finally:
        gate.execute("SELECT pg_advisory_unlock_all()")
    assert effects_of(gate, msg) == 1
    assert effects.calls == [(msg, 0), (msg, 0)]  # a new delivery, not a failed attempt
    assert stats.lost_pages == 1 and stats.handled == 1
    gate.close()


@pytest.mark.parametrize("mode", MODES)
def test_accept_reject_and_release_commit_with_the_handlers_writes(mode: str, client: pglogq.Client,
                                                                   dsn: str) -> None:
    # the three outcomes of a share group, each in the slot's transaction: accepted (acked with
    # its effect), released (a retry later, its write rolled back), rejected (a dead letter at
    # once whatever retries are left, its write rolled back, its reason kept)
    gate = prepare(client, dsn)
    client.set_queue_config("q", "max_retries", 5)
    effects = Effects(mode)
    ok = client.send("q", {}, type="ok")
    failed = client.send("q", {}, type="fail")
    rejected = client.send("q", {}, type="reject")
    client.tick("q", force=True)
    stats = run_once(mode, spec_for(dsn, effects, concurrency=2), stop_when_idle=True)
    stats2 = run_once(mode, spec_for(dsn, effects, worker="rest"), stop_when_idle=True)  # what a slot left
    assert (stats.handled + stats2.handled, stats.retried + stats2.retried, stats.dead + stats2.dead) == (1, 1, 1)
    assert [state_of(client, m) for m in (ok, failed, rejected)] == ["done", "retry", "dead"]
    assert [effects_of(gate, m) for m in (ok, failed, rejected)] == [1, 0, 0]
    (dead,) = client.dlq_inspect("q", "c")
    assert (dead.msg_id, dead.reason) == (rejected, "cannot ever succeed")
    gate.close()


def test_nack_dead_is_checked() -> None:
    assert pglogq.Nack("x").dead is False
    assert pglogq.Nack("x", dead=True).dead is True
    with pytest.raises(TypeError, match="dead must be True or False"):
        pglogq.Nack("x", dead=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
def test_a_rejected_event_of_a_key_is_dead_at_once_and_its_key_goes_on(mode: str, client: pglogq.Client,
                                                                       dsn: str) -> None:
    # a partitioned queue: a lease is a partition's page, whose first failure is nacked at once
    # (strict order); a rejected one goes to the dead-letter queue, not a retry holding its key
    client.create_queue("q", partitions=2)
    client.set_queue_config("q", "max_retries", 5)
    client.subscribe("q", "c", share=True)
    with psycopg.connect(dsn, autocommit=True) as gate:
        gate.execute(EFFECT_DDL)
        rejected = client.send("q", {}, type="reject", key="k")
        after = client.send("q", {}, type="ok", key="k")
        client.tick("q", force=True)
        effects = Effects(mode)
        stats = run_once(mode, spec_for(dsn, effects), stop_when_idle=True)
        assert (stats.dead, stats.retried) == (1, 0)
        assert [state_of(client, m) for m in (rejected, after)] == ["dead", "done"]
        assert [effects_of(gate, m) for m in (rejected, after)] == [0, 1]
