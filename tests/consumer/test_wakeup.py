"""Wake-ups: a consumer notices when tick notifications never arrive and says so once."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import MODES, Spec, running
from tests.support.waiting import wait_for


@pytest.mark.parametrize("mode", MODES)
def test_missing_notifications_are_detected_and_logged_once(
    mode: str, client: pglogq.Client, dsn: str, new_db: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    # the listener LISTENs in another database, like behind a transaction-mode pooler:
    # no notification ever arrives, events are found by polling only
    elsewhere = new_db()

    def deaf(consumer: Any) -> None:
        if mode == "thread":
            consumer._conninfo = lambda: elsewhere
        else:

            async def conninfo() -> str:
                return elsewhere

            consumer._conninfo = conninfo

    handled = threading.Semaphore(0)
    spec = Spec(dsn, "q", "c", kwargs={"poll_interval": 0.1, "notify_miss_limit": 3}, post_build=deaf)
    spec.handler()(lambda msg: handled.release())
    caplog.set_level(logging.WARNING, logger="pglogq.consumer")
    with running(mode, spec) as r:
        for _ in range(6):
            time.sleep(0.3)  # let the consumer go back to waiting: the event is then found by a poll
            client.send("q", {})
            client.tick("q", force=True)
            assert handled.acquire(timeout=30)
        r.stop()
        stats = r.join()
    assert stats.handled == 6
    warnings = [rec for rec in caplog.records if "no tick notification arrived" in rec.getMessage()]
    assert len(warnings) == 1
    assert r.consumer.health.notifications == 0
    assert r.consumer.wakeup.reconnects >= 1
    # the probe completed without its notification: that, and only that, makes it poll for good
    assert r.consumer.wakeup.deaf
    assert "tick notifications cannot arrive" in caplog.text


def _cut_the_probe(dsn: str) -> None:
    """Terminate the backend of the listener that sits in its probe's LISTEN, and wait until it is
    gone: the connection breaks between the probe's LISTEN and its notification."""
    probing = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE %s"
    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(probing, ('LISTEN "pglogq.probe%',)).fetchall()]
        assert len(pids) == 1, pids
        conn.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        wait_for(lambda: not conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pids[0],)).fetchall(),
                 "the probing backend to exit")


def _listening_on(dsn: str, channel: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            (f'LISTEN "{channel}"',),
        ).fetchall()
    return bool(rows)


def _before_the_first_probe(mode: str, action: Callable[[], None]) -> Callable[[Any], None]:
    """A consumer's post_build hook: ``action`` runs (in a thread in asyncio mode) before the
    listener's first probe NOTIFY is sent, i.e. while the listener is being set up."""
    done: list[bool] = []

    def hook(consumer: Any) -> None:
        real = consumer._send_probe
        if mode == "thread":

            def send_probe(channel: str) -> None:
                if not done:
                    done.append(True)
                    action()
                real(channel)

        else:

            async def send_probe(channel: str) -> None:  # type: ignore[misc]
                if not done:
                    done.append(True)
                    await asyncio.to_thread(action)
                await real(channel)

        consumer._send_probe = send_probe

    return hook


@pytest.mark.parametrize("mode", MODES)
def test_listener_lost_during_its_probe_listens_again(
    mode: str, client: pglogq.Client, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A listener connection that breaks while it probes (a restart, a failover) is no proof of a
    pooler: the consumer reconnects, probes again, LISTENs, and a tick wakes it long before its
    hour-long poll."""
    client.create_queue("q")
    client.subscribe("q", "c")
    cuts: list[str] = []

    def cut_the_probe() -> None:
        # the probe's NOTIFY is sent once the listener is in its probe's LISTEN: the first one
        # finds that connection terminated first
        _cut_the_probe(dsn)
        cuts.append("cut")

    cut_first_probe = _before_the_first_probe(mode, cut_the_probe)
    handled = threading.Event()
    # a probe waits for its notification only as long as it does not come: a generous timeout
    # costs nothing and keeps a loaded machine from failing the second probe
    spec = Spec(dsn, "q", "c", kwargs={"poll_interval": 3600, "listen_probe_timeout": 60},
                post_build=cut_first_probe)
    spec.handler()(lambda msg: handled.set())
    caplog.set_level(logging.WARNING, logger="pglogq.consumer")
    with running(mode, spec) as r:
        wait_for(lambda: _listening_on(dsn, "pglogq.q"), "the consumer to LISTEN again after its lost probe")
        client.send("q", {})
        client.tick("q", force=True)
        assert handled.wait(60), "the tick's notification did not wake the consumer"
        r.stop()
        stats = r.join()
    assert len(cuts) == 1
    assert stats.handled == 1
    assert not r.consumer.wakeup.deaf
    assert "cannot arrive" not in caplog.text
    assert "pooler" not in caplog.text


@pytest.mark.parametrize("mode", MODES)
def test_a_tick_written_while_the_listener_is_set_up_is_received(
    mode: str, client: pglogq.Client, dsn: str
) -> None:
    """The listener connects, probes and LISTENs at the first wait, after the loop's first receive
    found nothing: a tick written in between sent its NOTIFY to no one.  The first wait returns at
    once, so the loop receives again; it waited a whole poll_interval (here an hour; 1 s by
    default, the whole wait of the jobs_mix benchmark's short jobs, whose workers start as the
    jobs are sent)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ticked: list[int] = []

    def send_and_tick() -> None:
        with pglogq.Client(dsn) as other:
            other.send("q", {"between": 1})
            ticked.append(other.tick("q", force=True) or 0)

    tick_before_the_listen = _before_the_first_probe(mode, send_and_tick)
    handled = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"poll_interval": 3600, "listen_probe_timeout": 60},
                post_build=tick_before_the_listen)
    spec.handler()(lambda msg: handled.set())
    with running(mode, spec) as r:
        assert handled.wait(60), "the event ticked while the listener was set up waited for the poll"
        r.stop()
        r.join()
    assert ticked


@pytest.mark.parametrize("mode", MODES)
def test_an_idle_consumer_waits_without_waking(mode: str, client: pglogq.Client, dsn: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing to receive: the heartbeat side waits for a page with no timeout, and the listener
    waits on its socket, never in psycopg's notifies() with a timeout (whose wait wakes every
    0.1 s: an idle consumer process took 0.67 % of a core, 0.20 % without those wake-ups).
    An event then still starts at once, and its page is renewed by the heartbeat side."""
    client.create_queue("q")
    client.subscribe("q", "c")
    module: Any = pglogq._concurrency if mode == "thread" else pglogq._concurrency_async
    heartbeat_waits: list[float | None] = []
    timed_notifies: list[float] = []
    wait_event = module.wait_event

    def is_heartbeat(event: Any) -> bool:
        return any(event is loop._hb_wake for loop in consumers[0]._loops) if consumers else False

    if mode == "thread":
        def counting(event: Any, timeout: float | None) -> bool:
            if is_heartbeat(event):
                heartbeat_waits.append(timeout)
            return bool(wait_event(event, timeout))
    else:
        async def counting(event: Any, timeout: float | None) -> bool:  # type: ignore[misc]
            if is_heartbeat(event):
                heartbeat_waits.append(timeout)
            return bool(await wait_event(event, timeout))
    monkeypatch.setattr(module, "wait_event", counting)
    for cls in (psycopg.Connection, psycopg.AsyncConnection):
        notifies = cls.notifies

        def spy(self: Any, *args: Any, _orig: Any = notifies, **kwargs: Any) -> Any:
            if kwargs.get("timeout"):
                timed_notifies.append(kwargs["timeout"])
            return _orig(self, *args, **kwargs)
        monkeypatch.setattr(cls, "notifies", spy)

    consumers: list[Any] = []
    handled = threading.Semaphore(0)
    spec = Spec(dsn, "q", "c", kwargs={"heartbeat_interval": 0.05}, post_build=consumers.append)

    @spec.handler()
    def slow(msg: Any) -> None:
        time.sleep(0.3)  # several heartbeat intervals: the page is renewed meanwhile
        handled.release()

    with running(mode, spec) as r:
        wait_for(lambda: r.consumer.wakeup is not None and r.consumer.wakeup.listening, "the listener")
        wait_for(lambda: heartbeat_waits, "the heartbeat side to wait")
        timed_notifies.clear()  # the probe of the listener's setup waits in notifies(): once
        idle = len(heartbeat_waits)
        time.sleep(1.0)  # idle: at most one wait begun, and it has no timeout
        assert len(heartbeat_waits) - idle <= 1
        assert heartbeat_waits[-1] is None
        client.send("q", {})
        client.tick("q", force=True)
        assert handled.acquire(timeout=30)
        assert any(w is not None for w in heartbeat_waits[idle:])  # it woke for the page
        r.stop()
        stats = r.join()
    assert stats.handled == 1
    assert timed_notifies == []


def test_a_reconnect_asked_for_during_a_wait_is_made_by_that_wait(client: pglogq.Client, dsn: str) -> None:
    """Another slot's health check asks the shared listener to reconnect while a slot waits on
    its socket: the wait ends at once and reconnects itself (closed under the waiting slot, the
    connection's descriptor could be reused by another connection while still waited on; a
    thread's select on it raised EBADF), and the next wait hears a notification again."""
    from pglogq import _wakeup

    client.create_queue("q")
    stop = threading.Event()
    wake = _wakeup.Wakeup(dsn, "q", stop, send_probe=lambda ch: _wakeup.send_probe(client, ch))
    try:
        assert wake.wait(0.01) is False  # connects, probes and LISTENs
        assert wake.listening
        before = wake.reconnects
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(wake.wait(3600)))
        waiter.start()
        wait_for(lambda: wake._waiting, "the wait on the socket")
        wake.reconnect()
        waiter.join(60)
        assert not waiter.is_alive() and result == [False]
        assert wake.reconnects == before + 1 and not wake.listening
        assert wake.wait(0.01) is False  # listens again
        assert wake.listening

        def notify() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("NOTIFY \"pglogq.q\"")

        threading.Timer(0.2, notify).start()
        assert wake.wait(3600) is True
    finally:
        stop.set()
        wake.close()


def test_a_listener_socket_numbered_above_1024_is_waited_on(dsn: str, tmp_path: Any) -> None:
    """A process with more than 1,024 open files (a raised limit, common in containers): the
    listener's socket gets a high number, which select.select refuses (ValueError: the
    consumer's run died); a selector waits on any."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard limit of open files ({hard}) is under 2,048")
    script = tmp_path / "high_fd.py"
    script.write_text(textwrap.dedent(f"""
        import os, resource, threading
        import pglogq
        from pglogq import _wakeup
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
        dsn = {dsn!r}
        client = pglogq.Client(dsn)
        client.create_queue("q")
        wake = _wakeup.Wakeup(dsn, "q", threading.Event(), send_probe=lambda ch: _wakeup.send_probe(client, ch))
        assert wake.wait(0.01) is False and wake.listening
        assert wake._conn.fileno() >= 1024, wake._conn.fileno()
        assert wake.wait(0.3) is False and wake.listening
        wake.close()
        client.close()
        print("ok")
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
