"""The share consumer's runtime: handler slots that each hold a lease, ceding a lease's unstarted
tail behind a long event, stop, and the mode learnt from the subscription.  On both Consumer
(threads) and AsyncConsumer (asyncio).

The long job is held by an event the test controls (never a sleep): a test proves that short
jobs ran while the long one still ran by releasing it only after they all finished.  Every
handler call is counted per message id: nothing runs twice, nothing is lost."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import MODES, Spec, run_once, running
from tests.support.waiting import wait_for

pytestmark = pytest.mark.parametrize("mode", MODES)


class Jobs:
    """The handler of the tests: 'long' waits for :attr:`release`, anything else returns at once;
    every call is recorded (message id, the slot's worker name)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.release = threading.Event()
        self.long_started = threading.Event()
        self.lock = threading.Lock()
        self.calls: dict[int, list[str]] = defaultdict(list)
        self.done: list[int] = []
        self.long_worker = ""

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()  # a failed test never leaves the long job waiting

    def __call__(self, msg: Any) -> Any:
        with self.lock:
            self.calls[msg.msg_id].append(msg.worker)
        if msg.type == "long":
            self.long_worker = msg.worker
            self.long_started.set()
            if self.mode == "asyncio":
                return self._wait_async(msg.msg_id)
            assert self.release.wait(120), "the test never released the long job"
        with self.lock:
            self.done.append(msg.msg_id)
        return None

    async def _wait_async(self, msg_id: int) -> None:
        assert await asyncio.to_thread(self.release.wait, 120), "the test never released the long job"
        with self.lock:
            self.done.append(msg_id)

    def ran_once(self, ids: list[int]) -> None:
        assert sorted(self.calls) == sorted(ids), "an event was lost, or one not sent was run"
        twice = {m: w for m, w in self.calls.items() if len(w) != 1}
        assert not twice, f"run more than once: {twice}"


def share_queue(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c", share=True)


def spec_for(dsn: str, jobs: Jobs, **kwargs: Any) -> Spec:
    spec = Spec(dsn, "q", "c", kwargs=dict({"poll_interval": 0.2, "heartbeat_interval": 0.2}, **kwargs))
    spec.handler()(jobs)
    return spec


def test_short_jobs_run_beside_a_long_one(mode: str, client: pglogq.Client, dsn: str) -> None:
    # two slots; the long job first, then short jobs: the idle slot runs them all while the
    # long one is held (its release comes only after they are done)
    share_queue(client)
    jobs = Jobs(mode)
    long_id = client.send("q", {}, type="long")
    client.tick("q", force=True)
    with running(mode, spec_for(dsn, jobs, concurrency=2, worker="w")) as r, jobs:
        assert jobs.long_started.wait(60)
        short = client.send_batch("q", [{"n": i} for i in range(50)], type="short")
        client.tick("q", force=True)
        wait_for(lambda: set(short) <= set(jobs.done), "every short job done", timeout=60)
        assert long_id not in jobs.done  # the long one still runs
        assert {w for m in short for w in jobs.calls[m]} == {"w-0", "w-1"} - {jobs.long_worker}
        jobs.release.set()
        wait_for(lambda: long_id in jobs.done, "the long job done", timeout=60)
        r.stop()
        stats = r.join()
    jobs.ran_once([long_id, *short])
    assert stats.handled == 51 and stats.failed == 0
    assert r.consumer.shared is True  # learnt from the subscription (share left unset)
    assert len(client.receive("q", "c", worker="late")) == 0  # every lease acknowledged


@pytest.mark.parametrize("marked_ahead", [False, True])
def test_a_long_event_cedes_the_rest_of_its_lease(mode: str, marked_ahead: bool, client: pglogq.Client,
                                                   dsn: str) -> None:
    # one tick: the long job and 9 short ones, leases of 10: whichever slot takes the lease holds
    # them all behind the long job until it cedes them; the other slot runs them
    share_queue(client)
    jobs = Jobs(mode)
    long_id = client.send("q", {}, type="long")
    short = client.send_batch("q", [{"n": i} for i in range(9)], type="short")
    client.tick("q", force=True)

    def quick_pace(c: Any) -> None:
        c._pace = 1e-6  # handlers measured quick: receive marks the whole lease started ahead

    spec = spec_for(dsn, jobs, concurrency=2, max_messages=10, cede_after=0.2)
    if marked_ahead:
        spec.post_build = quick_pace
    with running(mode, spec) as r, jobs:
        wait_for(lambda: set(short) <= set(jobs.done), "the ceded events run by the other slot", timeout=60)
        assert long_id not in jobs.done
        assert {w for m in short for w in jobs.calls[m]} == {r.consumer._loops[0].label,
                                                           r.consumer._loops[1].label} - {jobs.long_worker}
        jobs.release.set()
        wait_for(lambda: long_id in jobs.done, "the long job done", timeout=60)
        r.stop()
        stats = r.join()
    jobs.ran_once([long_id, *short])
    assert stats.ceded == 9 and stats.handled == 10 and stats.failed == 0
    assert len(client.receive("q", "c", worker="late")) == 0


def test_stop_finishes_the_running_event_and_cedes_the_rest(mode: str, client: pglogq.Client, dsn: str) -> None:
    share_queue(client)
    jobs = Jobs(mode)
    long_id = client.send("q", {}, type="long")
    short = client.send_batch("q", [{"n": i} for i in range(9)], type="short")
    client.tick("q", force=True)
    # cede_after far away: only stop gives the tail back; one slot, so nothing else runs it
    with running(mode, spec_for(dsn, jobs, max_messages=10, cede_after=3600)) as r, jobs:
        assert jobs.long_started.wait(60)
        r.stop()
        wait_for(lambda: r.consumer._loops[0].stats.ceded == 9, "the tail ceded at stop", timeout=60)
        assert r.thread.is_alive()  # the long job is still running: stop waits for it
        jobs.release.set()
        stats = r.join()
    assert (stats.handled, stats.ceded) == (1, 9)
    assert jobs.done == [long_id]
    # the ceded events go to the next worker that asks, each once
    again = Jobs(mode)
    stats = run_once(mode, spec_for(dsn, again, worker="next"), stop_when_idle=True)
    again.ran_once(short)
    assert stats.handled == 9
    jobs.calls.update(again.calls)
    jobs.ran_once([long_id, *short])


def test_an_idle_slot_gets_the_tail_without_waiting_for_cede_after(mode: str, client: pglogq.Client,
                                                                  dsn: str) -> None:
    # a lease of 10, the long job first; cede_after far away (an hour): the tail comes back only
    # because the other slot of the process is idle (its receive found nothing), and that slot
    # runs it while the long job is held
    share_queue(client)
    jobs = Jobs(mode)
    long_id = client.send("q", {}, type="long")
    short = client.send_batch("q", [{"n": i} for i in range(9)], type="short")
    client.tick("q", force=True)
    spec = spec_for(dsn, jobs, concurrency=2, worker="i", max_messages=10, cede_after=3600)
    with running(mode, spec) as r, jobs:
        assert jobs.long_started.wait(60)
        idle = ({"i-0", "i-1"} - {jobs.long_worker}).pop()
        wait_for(lambda: set(short) <= set(jobs.done), "the tail run by the idle slot", timeout=30)
        assert long_id not in jobs.done
        assert {w for m in short for w in jobs.calls[m]} == {idle}
        jobs.release.set()
        wait_for(lambda: long_id in jobs.done, "the long job done", timeout=60)
        r.stop()
        stats = r.join()
    jobs.ran_once([long_id, *short])
    assert (stats.handled, stats.ceded, stats.failed) == (10, 9, 0)
    assert len(client.receive("q", "c", worker="late")) == 0


def worker_rows(dsn: str) -> set[str]:
    """The worker names of the share consumer that have received at least once."""
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT worker_name FROM pglogq.subscriber WHERE worker_name IS NOT NULL")}


def test_a_drain_ends_only_when_every_slot_is_idle(mode: str, client: pglogq.Client, dsn: str) -> None:
    # one lease of 10 (the long job first) taken by one slot; the other slot's receive finds
    # nothing while the long job runs.  Only then is the busy slot allowed to cede (cede_after is
    # lowered by the test): a drain must not have let the idle slot go, it takes the ceded tail
    # and runs it while the long job is still held
    share_queue(client)
    jobs = Jobs(mode)
    long_id = client.send("q", {}, type="long")
    short = client.send_batch("q", [{"n": i} for i in range(9)], type="short")
    client.tick("q", force=True)
    spec = spec_for(dsn, jobs, concurrency=2, worker="d", max_messages=10, cede_after=3600)
    with running(mode, spec, stop_when_idle=True) as r, jobs:
        assert jobs.long_started.wait(60)
        idle = ({"d-0", "d-1"} - {jobs.long_worker}).pop()
        wait_for(lambda: idle in worker_rows(dsn), "the other slot's receive (it finds nothing)", timeout=60)
        for slot in r.consumer._loops:
            slot.cede_after = 0.05  # now the busy slot gives its tail back
        wait_for(lambda: set(short) <= set(jobs.done), "the ceded events run while the long job runs",
                 timeout=30)
        assert long_id not in jobs.done
        assert {w for m in short for w in jobs.calls[m]} == {idle}
        jobs.release.set()
        stats = r.join()  # the drain ends once both slots are idle
    jobs.ran_once([long_id, *short])
    assert (stats.handled, stats.ceded, stats.failed) == (10, 9, 0)
    assert len(client.receive("q", "c", worker="late")) == 0


def test_many_slots_drain_every_event_once(mode: str, client: pglogq.Client, dsn: str) -> None:
    # workers x concurrency slots, adaptive leases: a drain handles each event once
    share_queue(client)
    jobs = Jobs(mode)
    ids: list[int] = []
    for t in range(5):
        ids += client.send_batch("q", [{"t": t, "n": i} for i in range(200)], type="short")
        client.tick("q", force=True)
    spec = spec_for(dsn, jobs, workers=2, concurrency=2, worker="p")
    stats = run_once(mode, spec, stop_when_idle=True)
    # the drain ended only once every slot found nothing: it left nothing behind
    rest = run_once(mode, spec_for(dsn, jobs, worker="p2"), stop_when_idle=True)
    jobs.ran_once(ids)
    assert (stats.handled, rest.handled) == (len(ids), 0)
    assert {w for ws in jobs.calls.values() for w in ws} <= {"p-0", "p-1", "p-2", "p-3"}


def test_share_setting_must_match_the_subscription(mode: str, client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "ordinary")
    client.subscribe("q", "c", share=True)
    client.send("q", {})
    client.tick("q", force=True)
    jobs = Jobs(mode)
    bad = Spec(dsn, "q", "ordinary", kwargs={"share": True})
    bad.handler()(jobs)
    with pytest.raises(pglogq.ShareModeMismatch, match="an ordinary consumer"):
        run_once(mode, bad, stop_when_idle=True)
    with pytest.raises(pglogq.ShareModeMismatch, match="a share consumer"):
        run_once(mode, spec_for(dsn, jobs, share=False), stop_when_idle=True)
    assert not jobs.calls  # nothing was received
    # the same consumers in their own modes
    assert run_once(mode, spec_for(dsn, jobs, share=True), stop_when_idle=True).handled == 1
    plain = Spec(dsn, "q", "ordinary", kwargs={"share": False})
    plain.handler()(Jobs(mode))
    assert run_once(mode, plain, stop_when_idle=True).handled == 1


def test_share_arguments_are_checked(mode: str, dsn: str) -> None:
    cls: Any = pglogq.Consumer if mode == "thread" else pglogq.AsyncConsumer
    with pytest.raises(TypeError, match="share must be"):
        cls(dsn, "q", "c", share="yes")
    for bad in (0, -1, True, "1", 3601):
        with pytest.raises(ValueError, match="cede_after"):
            cls(dsn, "q", "c", cede_after=bad)


def test_stop_on_a_partitioned_queue_finishes_the_page_without_trying_to_cede(
        mode: str, client: pglogq.Client, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """A partition's page is never ceded (the events after a started one are its keys' next):
    a slot stopped while it holds one finishes it, as an ordinary consumer's stop does, without
    asking the engine to cede (refused: PQ092).  It asked before each remaining start, and logged
    "could not give back" each time."""
    client.create_queue("q", partitions=2)
    client.subscribe("q", "c", share=True)
    jobs = Jobs(mode)
    long_id = client.send("q", {}, type="long", key="k")
    short = client.send_batch("q", [{"n": i} for i in range(9)], type="short", keys=["k"] * 9)
    client.tick("q", force=True)
    with running(mode, spec_for(dsn, jobs, max_messages=10, cede_after=0.05)) as r, jobs:
        assert jobs.long_started.wait(60)
        r.stop()
        jobs.release.set()
        stats = r.join()
    assert (stats.handled, stats.ceded) == (10, 0)
    jobs.ran_once([long_id, *short])
    assert jobs.done == [long_id, *short]  # the key's order
    assert "could not give back" not in caplog.text
