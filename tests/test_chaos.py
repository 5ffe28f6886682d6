"""The chaos harness in CI: a short run with a fixed seed must lose nothing and invent nothing.

The run starts its own embedded PostgreSQL (it crashes and restarts it), so it is
``embedded_only``: it runs once, not again against the shared server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pglogq.chaos.checker import check
from pglogq.chaos.history import Recorder
from pglogq.chaos.nemesis import MEAN_INTERVAL, schedule

SEED = 7
DURATION = 75


@pytest.mark.embedded_only
def test_short_chaos_run_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pglogq.chaos", "--seed", str(SEED), "--duration", str(DURATION),
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=280,
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["drained"], report
    subs = report["subscribers"]
    assert set(subs) == {"c1", "c2", "c3"}
    for name, s in subs.items():
        assert s["lost"] == 0, (name, s["examples"])
        assert s["unexpected"] == 0, (name, s["examples"])
        assert s["poison_not_dead"] == 0, (name, s)
        assert s["delivered_ids"] >= report["sends"]["ok"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the run did what it claims: many sends, every kind of fault, unknown outcomes included
    assert report["sends"]["ok"] > 1000
    assert report["sends"]["indeterminate"] > 0
    faults = report["faults"]
    for kind in MEAN_INTERVAL:
        assert faults.get(kind, 0) > 0, kind
    assert faults.get("proxy_drop_after_commit", 0) > 0
    assert faults.get("idle_in_transaction_timeout", 0) > 0


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
