"""Smoke test of the benchmark suite: ``python -m tests.harness.bench --quick`` runs every scenario against the
test server and writes its report.  Only that numbers (or skip lines with a reason) came out of
every scenario is checked; speed is the benchmark's business, never a test's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import child_env
from tests.harness.bench import history as hist
from tests.harness.bench import share_jobs as sj
from tests.harness.bench.cli import SCENARIOS
from tests.harness.bench.systems import ALL, RawPostgres


@pytest.mark.harness
def test_quick_bench_produces_numbers_for_every_scenario(server_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    env = {k: v for k, v in os.environ.items() if k != "PGLOGQ_DSN"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.harness.bench", "--quick", "--dsn", server_dsn, "--out", str(out)],
        capture_output=True, text=True, timeout=280, env=child_env(env),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    measures, skips = data["measures"], data["skips"]

    failed = [s for s in skips if s["reason"].startswith("the scenario failed")]
    assert not failed, failed
    for scenario in SCENARIOS:
        numbers = [m for m in measures if m["scenario"] == scenario and m["value"] == m["value"]]
        skipped = [s for s in skips if s["scenario"] == scenario and s["reason"].strip()]
        assert numbers or skipped, f"scenario {scenario} produced neither numbers nor a skip line"
        assert any(m["system"].startswith("pglogq") for m in numbers), f"no pglogq numbers in {scenario}"

    # the held-snapshot scenario recorded the figures no-bloat targets read
    held = {(m["case"], m["system"]) for m in measures if m["scenario"] == "held_xmin"}
    for figure in (("metadata growth after warm-up", "pglogq (held xmin)"), ("throughput held / without", "pglogq"),
                   ("p99 held / without", "pglogq"), ("dead tuples at end, event tables", "pglogq (held xmin)")):
        assert figure in held, figure

    # the share consumer's rows beside the jobs table, which targets.py reads
    share = {(m["case"], m["system"]) for m in measures if m["scenario"] == sj.SCENARIO}
    for figure in ((sj.drain_case(2, 1), sj.SHARE), (sj.drain_case(8, 100), sj.TABLE),
                   (sj.held_case(2, 100), sj.SHARE), (sj.held_case(8, 1), sj.TABLE),
                   (sj.TAKEOVER_RATIO, sj.SHARE), (sj.TAKEOVER_BACK, sj.SHARE), (sj.TAKEOVER_ONCE, sj.SHARE),
                   (sj.META_GROWTH, sj.SHARE), (sj.META_DEAD, sj.SHARE)):
        assert figure in share, figure
    once = next(m for m in measures if m["scenario"] == sj.SCENARIO and m["case"] == sj.TAKEOVER_ONCE)
    assert once["value"] == 100, once  # every event of the killed worker's lease handled exactly once
    assert any(v["target"].startswith("takeover of a killed worker's lease") for v in data["targets"])

    # the job history figures targets.py reads
    history = {(m["case"], m["system"]) for m in measures if m["scenario"] == hist.SCENARIO}
    for figure in ((hist.RATIO, hist.PGLOGQ), (hist.FIRST, hist.PGLOGQ), (hist.HALF, hist.PGLOGQ),
                   (hist.trip_case(100, "p50"), hist.PGLOGQ), (hist.trip_case(100, "p99"), hist.PGLOGQ)):
        assert figure in history, figure

    # every system is either measured or skipped with its reason: none silently left out
    measured = {m["system"] for m in measures}
    rows_of = {RawPostgres.name: ("raw INSERT", "COPY", "plain SELECT")}  # the ceiling's rows
    for cls in ALL:
        name = cls.name
        labels = rows_of.get(name, (name,))
        seen = any(label in system for system in measured for label in labels) or any(
            s["system"] == name for s in skips)
        assert seen, f"{name}: neither measured nor skipped"
        for s in skips:
            if s["system"] == name:
                assert s["reason"].strip(), f"{name} skipped without a reason"

    assert (out / "report.md").read_text().startswith("# pglogq benchmark")
    assert data["targets"], "the targets were not evaluated"
