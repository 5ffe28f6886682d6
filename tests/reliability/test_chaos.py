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
