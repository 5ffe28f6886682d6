"""Day one, round three: the CLI tried as a new user would (a bad DSN, the embedded server under
workers, the demo's leftovers, the tutorial's ticker output, schedules in a pipe)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pglogq.cli.errors import Exit
from tests.cli.test_day_one import env_without_dsn, script

JOBS = '''
import pglogq

consumer = pglogq.Consumer(None, "jobs", "c")


@consumer.handler()
def handle(msg):
    print("handling", msg.msg_id, flush=True)
'''


@pytest.fixture
def refused_dsn() -> Iterator[str]:
    """A DSN whose port nothing listens on (bound and never listened: connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield f"postgresql://postgres@127.0.0.1:{s.getsockname()[1]}/postgres"
    finally:
        s.close()


def test_worker_against_an_unreachable_database_fails_at_once_with_the_reason(
    refused_dsn: str, tmp_path: Path
) -> None:
    """It retried forever (the consumer takes a connection error for a database that restarts).
    The bound only catches that hang; it measures nothing."""
    (tmp_path / "jobsmod.py").write_text(JOBS)
    proc = subprocess.run(
        [script(), "worker", "jobsmod:consumer", "--stop-when-idle"], cwd=tmp_path, capture_output=True,
        text=True, env={**env_without_dsn(), "PGLOGQ_DSN": refused_dsn}, timeout=90, check=False,
    )
    assert proc.returncode == Exit.CONNECTION, (proc.returncode, proc.stderr)
    assert "cannot connect to the database" in proc.stderr and "refused" in proc.stderr.lower(), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
