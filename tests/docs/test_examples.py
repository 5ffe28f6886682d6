"""Every program in examples/ runs, as a newcomer would run it, against a fresh database.

Each ``examples/*.py`` runs in a subprocess with ``PGLOGQ_DSN`` set to a fresh test database and
must exit 0 within the timeout; a line ``# test-expects: TEXT`` in the file makes ``TEXT`` a
required part of its standard output.  New examples are picked up without touching this file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

EXAMPLES = REPO / "examples"
TIMEOUT = 180


def examples() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def test_there_are_examples() -> None:
    names = {p.name for p in examples()}
    assert {"outbox.py", "fan_out.py"} <= names, names


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.name)
def test_example_runs(path: Path, dsn: str, tmp_path: Path) -> None:
    env = dict(os.environ, PGLOGQ_DSN=dsn, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    output = f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, f"{path.name} exited {proc.returncode}\n{output}"
    for expected in re.findall(r"^# test-expects: (.+)$", path.read_text(encoding="utf-8"), re.M):
        assert expected.strip() in proc.stdout, f"{path.name}: {expected.strip()!r} not printed\n{output}"
