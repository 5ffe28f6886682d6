"""``pglogq consumer subscribe --share`` and a share consumer's workers on the command line."""

from __future__ import annotations

import json

import pglogq
from pglogq.cli.errors import Exit
from tests.support.cli import js, ok, run


def test_subscribe_with_lanes_and_the_refusals(dsn: str) -> None:
    ok(dsn, "queue", "create", "jobs")
    got = js(dsn, "consumer", "subscribe", "jobs", "mailer", "--share", "--lanes")
    assert got == {"queue": "jobs", "consumer": "mailer", "share": True, "lanes": True, "subscribed": True}
    r = run(dsn, "consumer", "subscribe", "jobs", "mailer", "--share")  # without lanes: another mode
    assert r.exit_code == Exit.CONFLICT, r.output
    r = run(dsn, "consumer", "subscribe", "jobs", "plain", "--lanes")  # lanes for an ordinary consumer
    assert r.exit_code == Exit.INVALID, r.output
    assert "lanes are for share consumers" in r.output


def test_subscribe_share_and_receive_as_workers(dsn: str) -> None:
    ok(dsn, "queue", "create", "jobs")
    got = js(dsn, "consumer", "subscribe", "jobs", "mailer", "--share")
    assert got == {"queue": "jobs", "consumer": "mailer", "share": True, "lanes": False, "subscribed": True}
    again = ok(dsn, "consumer", "subscribe", "jobs", "mailer", "--share").stdout
    assert "share consumer 'mailer' was subscribed" in again
    # the other mode is a conflict, and nothing changes
    r = run(dsn, "consumer", "subscribe", "jobs", "mailer")
    assert r.exit_code == Exit.CONFLICT, r.output
    assert "exists as a share consumer" in r.stderr
    for n in range(3):
        ok(dsn, "send", "jobs", json.dumps({"n": n}))
    pglogq.Client(dsn).tick("jobs", force=True)
    # a share consumer's receive names its worker
    r = run(dsn, "receive", "jobs", "mailer")
    assert r.exit_code == Exit.INVALID, r.output
    assert "needs a worker name" in r.stderr
    # each receive takes a lease of --max events (its batch), handles and acknowledges it
    got = js(dsn, "receive", "jobs", "mailer", "--worker", "a", "--max", "1")
    assert [m["payload"] for m in got] == [{"n": 0}]
    got = js(dsn, "receive", "jobs", "mailer", "--worker", "b", "--max", "5")
    assert [m["payload"] for m in got] == [{"n": 1}, {"n": 2}]
    assert js(dsn, "receive", "jobs", "mailer", "--worker", "a") == []


def test_share_on_a_partitioned_queue(dsn: str) -> None:
    ok(dsn, "queue", "create", "parts", "--partitions", "4")
    ok(dsn, "consumer", "subscribe", "parts", "x", "--share")
    assert [(r["consumer_name"], r["share"]) for r in js(dsn, "consumer", "list", "parts")] == [("x", True)]


def test_consumer_list_and_info_say_the_mode(dsn: str) -> None:
    ok(dsn, "queue", "create", "jobs")
    ok(dsn, "consumer", "subscribe", "jobs", "mailer", "--share")
    ok(dsn, "consumer", "subscribe", "jobs", "audit")
    rows = {r["consumer_name"]: r for r in js(dsn, "consumer", "list", "jobs")}
    assert rows["mailer"]["share"] is True and rows["audit"]["share"] is False
    assert "mailer (share)" in ok(dsn, "consumer", "list", "jobs").stdout
    with pglogq.Client(dsn) as c:
        c.send("jobs", {"n": 1})
        c.tick("jobs", force=True)
        lease = c.receive("jobs", "mailer", worker="a", max_messages=1, start_first=0)
        assert lease.cede()  # the released row cede makes is no worker
        (info,) = c.consumer_info("jobs", "mailer")
        assert info.share and info.workers == 1 and info.open_batches == 1
