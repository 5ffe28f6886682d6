"""pglogq job show, pglogq jobs, pglogq schedule, pglogq queue type-config."""

from __future__ import annotations

import psycopg

import pglogq
from tests.support.cli import fails, js, ok, run


def test_job_show_and_jobs_pages(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    ids = client.send_batch("q", [{"n": i} for i in range(5)], type="report")
    client.tick("q", force=True)
    batch = client.receive("q", "a", max_messages=1)
    client.report_progress(batch.id, ids[0], percent=30, stage="loading", worker="w1")  # type: ignore[arg-type]
    [row] = js(dsn, "job", "show", "q", str(ids[0]))
    assert (row["consumer"], row["state"], row["worker"], row["percent"], row["stage"]) == (
        "a", "in-flight", "w1", 30.0, "loading")
    text = ok(dsn, "job", "show", "q", str(ids[1])).stdout
    assert "waiting" in text and "type report" in text
    page = js(dsn, "jobs", "q", "--limit", "2")
    assert [(j["state"], j["msg_id"]) for j in page["jobs"]] == [("in-flight", ids[0]), ("waiting", ids[1])]
    assert page["next"] is not None
    rest = js(dsn, "jobs", "q", "--limit", "10", "--after", page["next"])
    assert [j["msg_id"] for j in rest["jobs"]] == ids[2:] and rest["next"] is None
    assert js(dsn, "jobs", "q", "--state", "dead")["jobs"] == []
    assert "(more: --after" in ok(dsn, "jobs", "q", "--limit", "1").stdout
    fails(dsn, 3, "job", "show", "q", "999")
    fails(dsn, 3, "jobs", "q", "--consumer", "ghost")
    assert run(dsn, "jobs", "q", "--state", "running").exit_code == 2


def test_schedule_commands(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    out = js(dsn, "schedule", "add", "q", "nightly", "--cron", "30 2 * * *", "--payload", '{"job": "cleanup"}',
             "--type", "cleanup", "--missed", "catch_up")
    assert out == {"queue": "q", "name": "nightly", "added": True}
    assert js(dsn, "schedule", "add", "q", "nightly", "--cron", "30 2 * * *", "--payload",
              '{"job": "cleanup"}', "--type", "cleanup", "--missed", "catch_up")["added"] is False
    [s] = js(dsn, "schedule", "list", "q")
    assert (s["name"], s["cron"], s["payload"], s["missed"], s["next_due"]) == (
        "nightly", "30 2 * * *", {"job": "cleanup"}, "catch_up", None)
    assert "nightly" in ok(dsn, "schedule", "list").stdout
    fails(dsn, 5, "schedule", "add", "q", "nightly", "--cron", "0 3 * * *", "--payload", "{}")
    fails(dsn, 4, "schedule", "add", "q", "x", "--cron", "0 25 * * *", "--payload", "{}")
    fails(dsn, 4, "schedule", "add", "q", "x", "--cron", "* * * * *", "--payload", "not json")
    bad_policy = run(dsn, "schedule", "add", "q", "x", "--cron", "* * * * *", "--payload", "{}", "--missed", "all")
    assert bad_policy.exit_code == 2
    assert js(dsn, "schedule", "remove", "q", "nightly")["removed"] is True
    fails(dsn, 3, "schedule", "remove", "q", "nightly")
    assert js(dsn, "schedule", "list") == []


def test_status_shows_schedules_when_any(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.create_queue("r")
    assert "Schedules" not in ok(dsn, "status").stdout
    ok(dsn, "schedule", "add", "q", "nightly", "--cron", "30 2 * * *", "--payload", "{}")
    ok(dsn, "schedule", "add", "r", "often", "--cron", "*/5 * * * *", "--payload", "{}")
    human = ok(dsn, "status").stdout
    assert "Schedules" in human and max(len(line) for line in human.splitlines()) <= 80
    [line] = [x for x in human.splitlines() if "nightly" in x]
    assert "30 2 * * *" in line and "not planned yet" in line
    st = js(dsn, "status")
    assert [(x["queue_name"], x["name"], x["next_due"]) for x in st["schedules"]] == [
        ("q", "nightly", None), ("r", "often", None)]
    assert [x["name"] for x in js(dsn, "status", "r")["schedules"]] == ["often"]  # the queue's only
    ok(dsn, "ticker", "run", "--once")  # the ticker plans the next run
    [line] = [x for x in ok(dsn, "status", "q").stdout.splitlines() if "nightly" in x]
    assert " in " in line and "not planned" not in line, line
    ok(dsn, "schedule", "remove", "q", "nightly")
    ok(dsn, "schedule", "remove", "r", "often")
    assert "Schedules" not in ok(dsn, "status").stdout


def test_queue_type_config(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    assert js(dsn, "queue", "type-config", "q", "payment", "max_retries", "0")["value"] == "0"
    ok(dsn, "queue", "type-config", "q", "report", "retry_delay", "30 seconds")
    rows = js(dsn, "queue", "type-config", "q")
    assert [(r["type"], r["max_retries"]) for r in rows] == [("payment", 0), ("report", None)]
    assert js(dsn, "queue", "type-config", "q", "payment", "max_retries", "--reset")["value"] is None
    assert [r["type"] for r in js(dsn, "queue", "type-config", "q")] == ["report"]
    fails(dsn, 4, "queue", "type-config", "q", "t", "retry_factor", "0.5")
    fails(dsn, 4, "queue", "type-config", "q", "t", "speed", "1")
    fails(dsn, 3, "queue", "type-config", "nope")
    assert ok(dsn, "queue", "config", "q", "max_retries", "0").stdout.strip() == "q: max_retries = 0"


def test_queue_config_changes_the_layout_of_a_queue_at_rest(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"n": 1})
    fails(dsn, 4, "queue", "config", "q", "partitions", "4")  # not ticked yet: in flight
    client.tick("q", force=True)
    batch = client.receive("q", "c")
    assert len(batch) == 1 and batch.ack()
    assert ok(dsn, "queue", "config", "q", "partitions", "4").stdout.strip() == "q: partitions = 4"
    assert client.queue_info("q")[0].partitions == 4
    assert js(dsn, "queue", "config", "q", "partitions", "1")["value"] == "1"


def test_status_lists_the_soonest_schedules_and_counts_the_rest(client: pglogq.Client, dsn: str) -> None:
    """Many schedules: status lists the SCHEDULES_SHOWN soonest due and says how many more exist
    (it used to list every schedule)."""
    from pglogq.cli.status import SCHEDULES_SHOWN

    client.create_queue("q")
    n = SCHEDULES_SHOWN + 15
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pglogq.schedule (queue_id, name, cron, ev_payload, next_due)"
            " SELECT (SELECT queue_id FROM pglogq.queue WHERE queue_name = 'q'), 's' || i, '0 3 * * *', '{}',"
            " clock_timestamp() + interval '1 hour' * (100 - i) FROM generate_series(1, %s) i", (n,))
    st = js(dsn, "status")
    # the soonest: the highest numbers
    assert [x["name"] for x in st["schedules"]] == [f"s{i}" for i in range(n, n - SCHEDULES_SHOWN, -1)]
    assert st["schedules_total"] == n
    human = ok(dsn, "status").stdout
    assert f"and {n - SCHEDULES_SHOWN} more schedules" in human and "s1 " not in human
    assert js(dsn, "status", "q")["schedules_total"] == n
