"""The chaos harness in CI: a short run with a fixed seed must lose nothing and invent nothing;
and the harness's own parts (fault schedule, checker) do what the runs rely on.

The runs are the short versions of docs/reliability/chaos-long-run.md (marked ``harness``:
``pytest -m "not harness"`` leaves them out).  Each starts its own embedded PostgreSQL (it
crashes and restarts it), so it is ``embedded_only``: it runs once, not again against the
shared server.  The regressions the long runs found live with their subjects (tests/sql/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import child_env
from tests.harness.chaos.checker import check
from tests.harness.chaos.history import Recorder
from tests.harness.chaos.nemesis import MEAN_INTERVAL, MODE_INTERVAL, schedule

SEED = 7
DURATION = 75
KEYED_DURATION = 30  # 60-80 s in all, with the drain


@pytest.mark.harness
@pytest.mark.embedded_only
def test_short_chaos_run_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.harness.chaos", "--seed", str(SEED), "--duration", str(DURATION),
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=280, env=child_env(),
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["drained"], report
    assert report["cursor_regressions"] == []
    subs = report["subscribers"]
    assert set(subs) == {"c1", "c2", "c3"}
    for name, s in subs.items():
        assert s["lost"] == 0, (name, s["examples"])
        assert s["unexpected"] == 0, (name, s["examples"])
        assert s["poison_not_dead"] == 0, (name, s)
        # events that kill their consumer process end dead, not redelivered forever (issue 16 #2):
        # max_retries (2) + 1 deliveries, a few more to halve a crashed page of up to 200
        # events down to the killer, and the faults' own redeliveries
        assert s["killers_delivered"] > 0, (name, s)
        assert s["killer_not_dead"] == 0, (name, s)
        assert s["killer_max_deliveries"] <= 20, (name, s)
        assert s["delivered_ids"] >= report["sends"]["ok"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the run did what it claims: many sends, every kind of fault, unknown outcomes included
    assert report["sends"]["ok"] > 1000
    assert report["sends"]["indeterminate"] > 0
    faults = report["faults"]
    for kind in MEAN_INTERVAL:
        assert faults.get(kind, 0) > 0, kind
    assert faults.get("proxy_drop_after_commit", 0) > 0
    assert faults.get("killer_crash", 0) >= 3 * len(subs)
    assert faults.get("idle_in_transaction_timeout", 0) > 0


@pytest.mark.harness
@pytest.mark.embedded_only
def test_short_chaos_run_with_retention_and_reinstalls_loses_only_what_retention_skipped(tmp_path: Path) -> None:
    """issue 12 #17: the retention mode re-installs the schema and runs retention with
    max_consumer_lag = 2 s while everything runs.  Events retention made a consumer skip are
    recorded and not lost; nothing ticked within the limit is skipped (issue 12 #2)."""
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.harness.chaos", "--seed", str(SEED), "--duration", "45", "--mode", "retention",
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=280, env=child_env(),
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "retention"
    assert report["drained"], report
    assert report["cursor_regressions"] == []
    for name, s in report["subscribers"].items():
        assert s["lost"] == 0, (name, s["examples"])
        assert s["unexpected"] == 0, (name, s["examples"])
        assert s["skipped_within_limit"] == 0, (name, s["examples"])
        assert s["delivered_ids"] + s["skipped"] >= report["sends"]["ok"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    faults = report["faults"]
    for kind in MODE_INTERVAL["retention"]:
        assert faults.get(kind, 0) > 0, kind


@pytest.mark.harness
@pytest.mark.embedded_only
def test_short_keyed_chaos_run_keeps_each_keys_order(tmp_path: Path) -> None:
    """issue 14: the same faults on a queue of 4 partitions with keyed events and three
    cooperating workers: nothing lost or invented, the events of each key first delivered in
    the order they were sent, never one key in flight at two workers at once."""
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.harness.chaos", "--seed", str(SEED), "--duration", str(KEYED_DURATION),
         "--mode", "keyed", "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=280, env=child_env(),
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "keyed" and report["partitions"] == 4
    assert report["drained"], report
    assert report["cursor_regressions"] == []
    for name, s in report["subscribers"].items():
        assert s["lost"] == 0, (name, s["examples"])
        assert s["unexpected"] == 0, (name, s["examples"])
        assert s["per_key_order_violations"] == 0, (name, s["examples"])
        assert s["same_key_in_flight"] == 0, (name, s["examples"])
        assert s["keyed_deliveries"] >= report["sends"]["ok"] - 50, (name, s)  # 2pc events have no key
        assert s["delivered_ids"] >= report["sends"]["ok"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["sends"]["ok"] > 1000
    for kind in ("kill_consumer", "server_crash", "twin_consumer", "proxy_partition"):
        assert report["faults"].get(kind, 0) > 0, kind


def test_schedule_is_a_function_of_the_seed() -> None:
    assert schedule(3, 60) == schedule(3, 60)
    assert schedule(3, 60) != schedule(4, 60)
    assert {k for _, k in schedule(3, 20)} == set(MEAN_INTERVAL)


def test_checker_finds_lost_unexpected_and_duplicates(tmp_path: Path) -> None:
    p = Recorder(tmp_path / "producer-p1.log")
    for i in range(1, 6):
        p.write("invoke", f"p1:{i}")
    p.write_many([("ok", "p1:1"), ("ok", "p1:2"), ("fail", "p1:3"), ("info", "p1:4")])  # p1:5 killed
    c = Recorder(tmp_path / "consumer-c1.log")
    c.write_many([
        ("deliver", "p1:1", 1, "c1", "-", 0),
        ("deliver", "p1:1", 2, "c1", "-", 0),   # redelivered: duplicate
        ("deliver", "p1:3", 2, "c1", "-", 0),   # a failed send delivered: unexpected
        ("deliver", "p1:5", 2, "c1", "-", 0),   # indeterminate (producer killed): fine
        ("deliver", "zz:1", 2, "c1", "-", 0),   # never sent: unexpected
    ])
    report = check(tmp_path, ["c1"], {}, set())
    s = report["subscribers"]["c1"]
    assert report["sends"] == {"attempted": 5, "ok": 2, "failed": 1, "indeterminate": 2,
                               "indeterminate_reported": 1}
    assert s["lost"] == 1 and s["examples"]["lost"] == ["p1:2"]
    assert s["unexpected"] == 2 and s["examples"]["unexpected"] == ["p1:3", "zz:1"]
    assert s["duplicated"] == 1
    assert s["indeterminate_delivered"] == 1 and s["indeterminate_absent"] == 1


def test_checker_counts_retention_skips_apart_from_losses(tmp_path: Path) -> None:
    """issue 12 #17: an event a retention pass made the consumer skip is not lost; one skipped
    although it was ticked within the limit is reported (skipped_within_limit)."""
    p = Recorder(tmp_path / "producer-p1.log")
    p.write_many([(k, f"p1:{i}") for i in range(1, 5) for k in ("invoke", "ok")])
    Recorder(tmp_path / "consumer-c1.log").write("deliver", "p1:1", 1, "c1", "-", 0)
    Recorder(tmp_path / "retention-harness.log").write_many([
        ("skip", "p1:2", "c1", 0),   # legitimately skipped
        ("skip", "p1:3", "c1", 1),   # ticked within the limit, never delivered: wrong
        ("skip", "p1:1", "c1", 1),   # recorded, but delivered anyway: fine
        ("skip", "p1:4", "c2", 0),   # another consumer's skip
    ])
    s = check(tmp_path, ["c1"], {}, set())["subscribers"]["c1"]
    assert s["lost"] == 1 and s["examples"]["lost"] == ["p1:4"]
    assert s["skipped"] == 2
    assert s["skipped_within_limit"] == 1 and s["examples"]["skipped_within_limit"] == ["p1:3"]


def _keyed_sends(directory: Path, ids: list[str]) -> None:
    Recorder(directory / "producer-p1.log").write_many([(k, i) for i in ids for k in ("invoke", "ok")])


def _page(out: Recorder, page: str, worker: str, called: float, events: list[tuple[str, int]],
          done: float | None, committed: int = 1) -> None:
    """A page of consumer c1 holding ``events`` (id, kseq) of key k, received by ``worker``."""
    out.write("page", page, "c1", worker, called, called + 0.01, committed)
    out.write_many([("deliver", i, 1, "c1", worker, 0, page, "k", kseq) for i, kseq in events])
    if done is not None:
        out.write("done", page, done)


def test_checker_counts_per_key_order_violations(tmp_path: Path) -> None:
    """issue 14: an event first delivered after a later event of its key is a violation;
    redeliveries are not, and neither is an event whose send's outcome is unknown."""
    _keyed_sends(tmp_path, ["p1:1", "p1:2", "p1:3", "p1:5"])
    Recorder(tmp_path / "producer-p1.log").write("invoke", "p1:4")  # outcome unknown
    c = Recorder(tmp_path / "consumer-c1-a.log")
    _page(c, "a.1", "a", 1.0, [("p1:1", 1), ("p1:2", 2)], 1.1)
    _page(c, "a.2", "a", 2.0, [("p1:2", 2), ("p1:3", 3)], 2.1)  # p1:2 again: a redelivery
    _page(c, "a.3", "a", 3.0, [("p1:5", 5)], 3.1)
    d = Recorder(tmp_path / "consumer-c1-b.log")
    _page(d, "b.1", "b", 0.5, [("p1:3", 3)], 0.6)  # p1:3 before p1:1 and p1:2: they are late
    _page(d, "b.2", "b", 4.0, [("p1:4", 4)], 4.1)  # after p1:5, but its send is indeterminate
    s = check(tmp_path, ["c1"], {}, set(), dead_interval=3.0)["subscribers"]["c1"]
    assert s["per_key_order_violations"] == 2
    assert s["examples"]["per_key_order_violations"] == ["p1:1", "p1:2"]
    assert s["keyed_deliveries"] == 7
    assert s["lost"] == 0


def test_checker_counts_one_key_in_flight_at_two_workers(tmp_path: Path) -> None:
    """issue 14: pages of one key overlapping at two workers count, unless the first worker had
    been silent for dead_interval (a takeover), the overlap is within one worker (a twin process),
    or the receive was rolled back; a page whose process died stays in flight until that
    process file's next page."""
    _keyed_sends(tmp_path, [f"p1:{i}" for i in range(1, 10)])  # all of one key, k
    a = Recorder(tmp_path / "consumer-c1-a.log")
    b = Recorder(tmp_path / "consumer-c1-b.log")
    twin = Recorder(tmp_path / "consumer-c1-a-twin0.log")
    _page(a, "a.1", "a", 1.0, [("p1:1", 1)], 1.5)
    _page(b, "b.1", "b", 1.2, [("p1:2", 2)], 1.3)       # while a.1 runs: a violation
    _page(twin, "t.1", "a", 1.3, [("p1:1", 1)], 1.4)    # worker a again (its twin): fine
    _page(a, "a.2", "a", 2.0, [("p1:3", 3)], None)      # a dies holding it ...
    _page(b, "b.2", "b", 4.0, [("p1:3", 3)], 4.1)       # ... taken over 2 s later: a violation
    _page(b, "b.3", "b", 5.5, [("p1:3", 3)], 5.6)       # ... 3.5 s later: a takeover
    _page(b, "b.3x", "b", 5.8, [("p1:3", 3)], 5.9)      # a.2 was taken over: not in flight
    _page(a, "a.3", "a", 6.0, [("p1:4", 4)], 6.1)       # a is back: a.2 ended here
    _page(b, "b.4", "b", 6.5, [("p1:5", 5)], 6.6)
    _page(a, "a.4", "a", 7.0, [("p1:6", 6)], 7.9, committed=0)  # rolled back: never handed out
    _page(b, "b.5", "b", 7.2, [("p1:6", 6)], 7.3)
    s = check(tmp_path, ["c1"], {}, set(), dead_interval=3.0)["subscribers"]["c1"]
    assert s["same_key_in_flight"] == 2 and s["examples"]["same_key_in_flight"] == ["b.1", "b.2"]
    assert s["takeovers"] == 1
    assert s["per_key_order_violations"] == 0
