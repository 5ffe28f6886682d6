"""``pglogq cancel QUEUE MSG_ID [--running]`` through the installed script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pglogq
from tests.support.jobs import setup


def pglogq_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``pglogq`` script."""
    script = Path(sys.executable).parent / "pglogq"
    return subprocess.run([str(script), *args, "--dsn", dsn], capture_output=True, text=True, timeout=60)


def test_cli_cancel_and_its_exit_codes(client: pglogq.Client, dsn: str) -> None:
    ids = setup(client, 3)
    page = client.receive("q", "c", start_first=1)
    r = pglogq_cli(dsn, "cancel", "q", str(ids[2]))
    assert r.returncode == 0 and "cancelled" in r.stdout, r.stderr
    r = pglogq_cli(dsn, "cancel", "q", str(ids[2]), "--json")
    assert r.returncode == 5 and '"cancelled": false' in r.stdout, r
    assert "pglogq: error: message" in r.stderr and "was not cancelled" in r.stderr
    r = pglogq_cli(dsn, "cancel", "q", str(ids[0]))  # started
    assert r.returncode == 5, r
    r = pglogq_cli(dsn, "cancel", "q", str(ids[0]), "--running", "--json")
    assert r.returncode == 0 and '"stop_requested": true' in r.stdout, r
    assert client.stop_requests(page.id, ids) == [ids[0]]
    assert pglogq_cli(dsn, "cancel", "q", "999").returncode == 3  # never issued
    assert pglogq_cli(dsn, "cancel", "nosuch", "1").returncode == 3
    assert pglogq_cli(dsn, "cancel", "q", "x").returncode == 2
    assert pglogq_cli(dsn, "cancel", "q", str(2**63)).returncode in (2, 4)
    assert pglogq_cli(dsn, "cancel", "q", "0").returncode == 3
    client.mark_started(page.messages[2])
    assert page.ack()
    assert pglogq_cli(dsn, "cancel", "q", str(ids[0]), "--running").returncode == 5  # done: nothing runs it
