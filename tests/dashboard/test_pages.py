"""The dashboard's pages and actions over HTTP, on a real database: what each page
shows, the filters, paging and previews of the dead-letter page, the confirmation of bulk
actions, seek (plan, then apply), and that the dashboard holds no SQL of its own."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from starlette.testclient import TestClient

import pglogq
from pglogq import schedules
from pglogq.dashboard import Thresholds, create_app
from pglogq.dashboard.sampler import Sampler, sparkline
from pglogq.errors import UnknownMessage
from tests.support.dashboard import SCRIPT, LongJob, make_dead_letters, make_stuck_consumer, run
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "pages-token-0123"


@pytest.fixture
def tc(dsn: str) -> Iterator[TestClient]:
    app = create_app(dsn, actions=True, token={"alice": TOKEN}, sample_interval=0,
                     thresholds=Thresholds(stuck_after=timedelta(0)))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def test_overview_shows_queues_consumers_ticker_and_warnings(tc: TestClient, client: pglogq.Client) -> None:
    client.create_queue("alpha")
    client.create_queue("beta")
    make_stuck_consumer(client, "alpha", "slow")
    html = tc.get("/").text
    for text in ('data-queue="alpha"', 'data-queue="beta"', 'data-consumer="slow"', "no active ticker",
                 "consumer slow on alpha is stuck"):
        assert text in html, text
    assert tc.get("/", headers={"HX-Request": "true"}).text.lstrip().startswith('<section class="ticker"')
    with pglogq.start_ticker(tc.app.state.dashboard.client.dsn):  # type: ignore[attr-defined]
        wait_for(lambda: '<span class="badge good">active</span>' in tc.get("/").text)


def test_queue_page(tc: TestClient, client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    job = LongJob(dsn, "q", "builder", steps=2, stepped=True).start()
    job.step()
    job.started.wait(10)
    html = tc.get("/queues/q").text
    assert f'data-msg-id="{job.msg_id}"' in html
    assert '<progress max="100" value="0.0">' in html
    assert "step 0 of 2" in html and "worker-1" in html
    for _ in range(3):
        job.step()
    job.join()
    assert "Nothing in flight." in tc.get("/queues/q").text
    assert tc.get("/queues/nope").status_code == 404


def test_dlq_filters_pages_previews_and_load_all(tc: TestClient, client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    client.subscribe("q", "b")
    make_dead_letters(client, "q", "a", [{"i": i} for i in range(55)], type="small")
    (big,) = make_dead_letters(client, "q", "b", [{"blob": "y" * 5000, "needle": "Haystack"}], type="big")
    html = tc.get("/queues/q/dlq").text
    assert html.count('<article class="dead"') == 50
    live = tc.get("/queues/q/dlq?type=small", headers={"HX-Request": "true"}).text
    assert live.startswith('<p id="dlq-count"><b>55</b>') and "<article" not in live
    assert "<b>56</b> dead letter(s)" in html
    nxt = re.search(r'id="next-page" href="[^"]*before=(\d+)"', html)
    assert nxt
    rest = tc.get(f"/queues/q/dlq?before={nxt.group(1)}").text
    assert rest.count('<article class="dead"') == 6
    assert "next-page" not in rest
    assert tc.get("/queues/q/dlq?consumer=b").text.count('<article class="dead"') == 1
    assert tc.get("/queues/q/dlq?type=small").text.count('<article class="dead"') == 50
    assert tc.get("/queues/q/dlq?text=haystack").text.count('<article class="dead"') == 1
    assert tc.get("/queues/q/dlq?age=60").text.count('<article class="dead"') == 0
    one = tc.get("/queues/q/dlq?consumer=b").text
    assert "cut at 2,000 characters" in one and "load all" in one
    dead_id = client.dlq_search("q", msg_id=big)[0].dead_id
    full = tc.get(f"/queues/q/dlq/{dead_id}", headers={"HX-Request": "true"}).text
    assert full.startswith('<pre class="json payload full">') and "y" * 5000 in full
    assert tc.get("/queues/q/dlq/999999").status_code == 404


def test_bulk_actions_count_confirm_and_act(tc: TestClient, client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    make_dead_letters(client, "q", "a", [{"i": i} for i in range(3)], type="t1")
    make_dead_letters(client, "q", "a", [{"i": i} for i in range(2)], type="t2")
    page = tc.get("/queues/q/dlq/confirm?op=replay_all&type=t1").text
    assert "<b>3</b> dead letter(s)" in page and 'name="expected" value="3"' in page
    assert tc.get("/queues/q/dlq/confirm?op=purge&text=x").status_code == 400  # text cannot select a bulk action
    base = {"queue": "q", "type": "t1", "consumer": "", "age": "", "expected": "3"}
    assert tc.post("/actions/replay_all", data=base).status_code == 400  # no confirmation: nothing done
    assert client.dlq_count("q") == 5
    r = tc.post("/actions/replay_all", data={**base, "confirm": "yes"})
    assert "3 dead letter(s) replayed" in r.text
    r = tc.post("/actions/purge", data={**base, "type": "t2", "expected": "2", "confirm": "yes"})
    assert "2 dead letter(s) purged" in r.text
    assert client.dlq_count("q") == 0


def test_cancel_pause_resume_and_seek(tc: TestClient, client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    mid = client.send("q", {"x": 1})
    assert f"message {mid} cancelled" in tc.post("/actions/cancel", data={"queue": "q", "msg_id": str(mid)}).text
    assert tc.post("/actions/pause", data={"queue": "q"}).status_code == 200
    assert client.queue_info("q")[0].paused
    assert "Resume the queue" in tc.get("/queues/q").text
    tc.post("/actions/resume", data={"queue": "q"})
    assert not client.queue_info("q")[0].paused
    for _ in range(3):
        client.send("q", {"y": 1})
        client.tick("q", force=True)
    plan_page = tc.get("/queues/q/seek?consumer=c&to=latest").text
    assert 'id="plan"' in plan_page and "Apply this seek" in plan_page
    before = client.consumer_info("q", "c")[0].last_tick
    r = tc.post("/actions/seek", data={"queue": "q", "consumer": "c", "to": "latest"})
    assert "consumer c moved" in r.text
    assert client.consumer_info("q", "c")[0].last_tick != before
    bad = tc.post("/actions/seek", data={"queue": "q", "consumer": "nobody", "to": "latest"})
    assert bad.status_code == 404


def test_replay_without_a_queue_field(tc: TestClient, client: pglogq.Client) -> None:
    """The dead id alone names the dead letter: the action works and the page links home."""
    client.create_queue("q")
    client.subscribe("q", "c")
    make_dead_letters(client, "q", "c", [{"x": 1}])
    dead_id = client.dlq_search("q")[0].dead_id
    r = tc.post("/actions/replay", data={"dead_id": str(dead_id)})
    assert r.status_code == 200 and f"dead letter {dead_id} replayed" in r.text
    assert client.dlq_count("q") == 0


def test_two_operators_replay_the_same_dead_letter(tc: TestClient, client: pglogq.Client,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    make_dead_letters(client, "q", "c", [{"x": 1}])
    data = {"queue": "q", "dead_id": str(client.dlq_search("q")[0].dead_id)}
    assert tc.post("/actions/replay", data=data).status_code == 200
    with caplog.at_level(logging.WARNING, logger="pglogq.dashboard.actions"):
        second = tc.post("/actions/replay", data=data)
    assert second.status_code == 404 and "unknown dead letter" in second.text
    assert any("refused" in r.getMessage() and "by alice" in r.getMessage() for r in caplog.records)
    client.tick("q", force=True)
    assert len(client.receive("q", "c")) == 1  # replayed once


def test_lookup_without_and_with_an_id(tc: TestClient, client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    (mid,) = make_dead_letters(client, "q", "c", [{"who": "customer-42"}], reason="no such customer")
    assert 'id="lookup-form"' in tc.get("/lookup").text
    html = tc.get(f"/lookup?msg_id={mid}").text
    assert "no such customer" in html and "customer-42" in html
    assert "No dead letter." in tc.get("/lookup?queue=q&msg_id=999999").text


@dataclass(frozen=True)
class FakeState:
    consumer: str
    state: str
    msg_id: int
    since: datetime | None
    cursor: str | None = None


class ClientWithLookup(pglogq.AsyncClient):
    """Stands in for a client that has ``lookup`` (Client.lookup, where it exists)."""

    async def lookup(self, queue: str, msg_id: int) -> list[FakeState]:
        if queue != "q":
            raise UnknownMessage(f"unknown message {msg_id} on queue {queue}")
        return [FakeState("c", SCRIPT, msg_id, datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "x")]


def test_lookup_uses_client_lookup_where_it_exists(dsn: str, client: pglogq.Client) -> None:
    client.create_queue("q")
    client.create_queue("other")

    async def go() -> str:
        async with ClientWithLookup(dsn) as ac:
            with TestClient(create_app(ac)) as tc:
                return tc.get("/lookup?msg_id=7").text

    html = run(go())
    assert 'id="lookup-states"' in html and "no lookup of one event" not in html
    assert "<td>q</td><td>c</td><td>&lt;script&gt;" in html and "2026-01-02 03:04:05 UTC" in html
    assert "cursor" not in html


def test_sampler_keeps_history_and_drops_what_is_gone(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")

    async def go() -> Sampler:
        async with pglogq.AsyncClient(dsn) as ac:
            s = Sampler(ac, interval=0, count_interval=0)
            for _ in range(3):
                await s.snapshot()
            assert len(s.pending[("q", "c")]) == 3
            assert (await s.snapshot()).stored == {"q": 0}
            await ac.drop_queue("q", force=True)
            await s.snapshot()
            return s

    s = run(go())
    assert s.pending == {} and s.rate_in == {} and s.last is not None and s.last.stored == {}
    assert sparkline([(0, 1.0), (1, 3.0)], width=10, height=10) == "1.0,9.0 9.0,1.0"
    assert sparkline([(0, 1.0)]) == ""


def test_dashboard_holds_no_sql_and_no_driver() -> None:
    """It reads and acts through AsyncClient only (the public SQL API): no statement, no psycopg."""
    for path in sorted((ROOT / "pglogq" / "dashboard").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.startswith("psycopg") for n in names), path
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.search(r"\b(SELECT|INSERT|UPDATE|DELETE)\b.*\b(FROM|INTO|SET)\b|pglogq\.\w+\(",
                                     node.value), (path, node.value[:80])


def test_import_pglogq_does_not_load_the_dashboard() -> None:
    code = "import sys, pglogq; assert 'starlette' not in sys.modules and 'pglogq.dashboard' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_cli_dashboard_options(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pglogq.cli.dashboard import parse_tokens
    from pglogq.cli.errors import CliError
    from pglogq.cli.main import main

    assert parse_tokens(("alice=aaaaaaaa", "bbbbbbbb")) == {"alice": "aaaaaaaa", "operator": "bbbbbbbb"}
    for bad in (("x=short",), ("=aaaaaaaa",), ("a=aaaaaaaa", "a=bbbbbbbb")):
        with pytest.raises(CliError):
            parse_tokens(bad)
    out = CliRunner().invoke(main, ["dashboard", "--help"])
    assert out.exit_code == 0 and "--actions" in out.output and "127.0.0.1" in out.output


def test_warnings_silent_worker_dlq_growing_rotation_blocked(dsn: str, client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    job = LongJob(dsn, "q", "w", steps=1, stepped=True).start()
    job.step()
    job.started.wait(10)

    async def go() -> list[str]:
        async with pglogq.AsyncClient(dsn) as ac:
            s = Sampler(ac, interval=0, thresholds=Thresholds(silent_after=timedelta(0)))
            first = await s.snapshot()
            assert "dlq_growing" not in {w.kind for w in first.warnings}
            await asyncio.to_thread(make_dead_letters, client, "q", "c", [{"x": 1}])
            await ac.set_queue_config("q", "rotation_period", "1 second")
            await ac.send("q", {"after": 1})
            await ac.tick("q", force=True)

            async def blocked() -> list[str]:
                snap = await s.snapshot()
                kinds = [w.kind for w in snap.warnings]
                return kinds if "rotation_blocked" in kinds else []

            for _ in range(600):
                kinds = await blocked()
                if kinds:
                    return kinds
                await asyncio.sleep(0.05)
            raise AssertionError("rotation never reported blocked")

    kinds = run(go())
    assert {"worker_silent", "dlq_growing", "rotation_blocked"} <= set(kinds), kinds
    job.step()
    job.step()
    job.join()


def fire_schedules(dsn: str) -> dict[str, int]:
    """One pass of the ticker's schedule step (plans new schedules, sends what is due)."""
    async def main() -> dict[str, int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await schedules.fire_due(conn)

    return asyncio.run(main())


def cell(html: str, ident: str) -> str:
    m = re.search(rf'<td id="{ident}">(.*?)</td>', html, re.S)
    assert m, ident
    return m.group(1)


def schedule_row(html: str, name: str) -> str:
    m = re.search(rf'<tr data-schedule="{name}">(.*?)</tr>', html, re.S)
    assert m, name
    return m.group(1)


def test_queue_page_shows_the_layout_and_the_schedules(tc: TestClient, client: pglogq.Client, dsn: str) -> None:
    client.create_queue("orders", partitions=8)
    client.create_queue("mail", urgent_lane=True)
    client.schedule_add("orders", "nightly", "0 3 * * *", {"report": True}, missed="catch_up")
    client.schedule_add("orders", "minutely", "* * * * *", {"ping": 1})

    html = tc.get("/queues/orders").text
    assert "pglogq has none" not in html
    assert cell(html, "partitions").startswith("8 ")
    assert cell(html, "urgent-lane") == "off"
    assert "key_slot(key) mod 8" in cell(html, "keys")
    assert "no-schedules" not in html
    nightly = schedule_row(html, "nightly")
    assert "<code>0 3 * * *</code>" in nightly and "not planned yet" in nightly and "never" in nightly
    assert "caught up" in nightly and "active" in nightly

    assert fire_schedules(dsn)["planned"] == 2
    # a due time in the past, as after a ticker was away: the next pass sends it.  The start of
    # this minute, so that the occurrence after it is in the future: a pass sends every due time
    # up to now, and a due time 10 s back crossed a minute boundary in one run of six.  Not in
    # the last seconds of a minute, where the pass itself could run into the next one
    if datetime.now().second >= 55:
        time.sleep(61 - datetime.now().second)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pglogq.schedule SET next_due = date_trunc('minute', now()) WHERE name = 'minutely'")
    assert fire_schedules(dsn)["sent"] == 1
    (minutely,) = [r for r in client.schedule_list("orders") if r.name == "minutely"]
    assert minutely.next_due is not None and minutely.last_due is not None and minutely.last_msg_id is not None

    html = tc.get("/queues/orders", headers={"HX-Request": "true"}).text  # the live fragment shows them too
    nightly, row = schedule_row(html, "nightly"), schedule_row(html, "minutely")
    assert "not planned yet" not in nightly and "03:00:00 UTC (in " in nightly and "never" in nightly
    assert minutely.next_due.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") in row
    assert minutely.last_due.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") in row
    assert f"message {minutely.last_msg_id}</a>" in row
    assert re.search(r'<td class="num">1</td>\s*<td class="num">0</td>', row)  # sent 1, skipped 0

    client.set_queue_config("orders", "paused", True)
    html = tc.get("/queues/orders").text
    assert "queue paused" in schedule_row(html, "nightly")

    html = tc.get("/queues/mail").text
    assert cell(html, "partitions") == "none: one ordered log"
    assert cell(html, "urgent-lane").startswith("on: ")
    assert "No schedules" in html


def test_queue_page_of_a_plain_queue_says_it_has_no_layout_and_no_schedules(
        tc: TestClient, client: pglogq.Client) -> None:
    client.create_queue("plain")
    html = tc.get("/queues/plain").text
    assert cell(html, "partitions") == "none: one ordered log"
    assert cell(html, "urgent-lane") == "off"
    assert "place nothing" in cell(html, "keys")
    assert '<p id="no-schedules">No schedules: nothing is sent to this queue on a timetable.</p>' in html
    assert "data-schedule=" not in html
    assert "pglogq has none" not in html
