"""Day one: the README and the tutorial, as a newcomer runs them from a fresh clone
with no environment variable set (no PGLOGQ_DSN: the embedded PostgreSQL), leave nothing behind:
``pglogq status --check`` exits 0 afterwards, however much later it runs.

The embedded server lives in a temporary ``PGLOGQ_HOME`` (the newcomer's would be in their data
directory; the test must not touch the developer's), and is stopped at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_pages import DOCS, RUN_LANGS, Block, PageRun, blocks_of
from tests.support.paths import REPO

BIN = Path(sys.executable).parent


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGLOGQ_")}
    env["PGLOGQ_HOME"] = str(home)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return env


def _bash(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.embedded_only
def test_readme_and_tutorial_from_a_fresh_clone_leave_status_check_green(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir()
    env = _env(home)
    for key in [k for k in os.environ if k.startswith("PGLOGQ_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PGLOGQ_HOME", str(home))
    monkeypatch.chdir(work)
    run: PageRun | None = None
    try:
        # README "Two commands": the demo (the venv and install part is what a checkout does once)
        r = _bash("pglogq demo", env, work)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "using the embedded PostgreSQL" in r.stderr  # the DSN rule fell through to it
        dsn = _bash("pglogq dsn", env, work).stdout.strip()
        assert str(home) in dsn
        # ... and what the demo suggests next: its queue again, one more event, which a ticker pass ticks
        r = _bash("pglogq queue create pglogq_demo && pglogq send pglogq_demo '{\"order\": 99}'"
                  " && pglogq ticker run --once", env, work)
        assert r.returncode == 0, r.stdout + r.stderr
        run = PageRun(dsn, work)
        for page in (REPO / "README.md", DOCS / "tutorial.md"):
            run.ns.clear()  # each page is its own Python session
            for b in blocks_of(page):
                if b.lang not in RUN_LANGS or b.mark not in (None, "expect-error"):
                    continue
                _run(run, b, env, work)
        # "forever after": a consumer left behind would be behind and unseen for 1 ms already
        r = _bash("pglogq status --check --stale-after 1ms", env, work)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        if run is not None:
            run.close()
        _bash("pglogq embedded stop --yes", env, work)


def _run(run: PageRun, b: Block, env: dict[str, str], work: Path) -> None:
    if b.lang in ("bash", "sh"):
        r = _bash(b.code, env, work)
        failed_as_expected = (r.returncode == 0) != (b.mark == "expect-error")
        assert failed_as_expected, f"{b.where}: exit {r.returncode}\n{r.stdout}{r.stderr}"
    else:
        run.run(b)
