"""The server's disk fills up: sends fail clearly, change nothing, and succeed again when space
returns (checklist 12).  The test starts its own server (the harness's ChaosServer) with the
event tables on a small tmpfs, so it is ``embedded_only`` and needs root to mount it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

import pglogq
from tests.support.draining import drain


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.mark.embedded_only
def test_disk_full_fails_sends_clearly_and_they_resume(tmp_path: Path) -> None:
    """Checklist 12: event tables on a full disk → sends fail with SQLSTATE 53100 and change
    nothing; after space returns they succeed, and nothing acknowledged is lost."""
    from tests.harness.chaos.server import ChaosServer

    disk = Path(tempfile.mkdtemp(prefix="pglogq-disk-"))
    if not _mount_tmpfs(disk, "4M"):
        pytest.skip("needs root to mount a small tmpfs")
    server = ChaosServer(Path(tempfile.mkdtemp(prefix="pglogq-diskfull-")))
    try:
        shutil.chown(disk, "embedded_postgres", "embedded_postgres")
        server.setup()
        with pglogq.Client(server.dsn) as c, server.connect() as conn:
            c.install_schema()
            c.create_queue("q")
            c.subscribe("q", "c")
            conn.execute(f"CREATE TABLESPACE small LOCATION '{disk}'".encode())
            for (part,) in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE c.relname ~ '^event_[0-9]+_[0-9]+$'"
            ).fetchall():
                conn.execute(f"ALTER TABLE {part} SET TABLESPACE small".encode())
            ballast = disk / "ballast"
            ballast.write_bytes(b"\0" * 1024 * 1024)
            sent: list[int] = []
            with pytest.raises(psycopg.errors.DiskFull) as info:
                for _ in range(10000):
                    sent += c.send_batch("q", [{"pad": "x" * 1500} for _ in range(20)])
            assert "No space left on device" in str(info.value)
            assert len(sent) > 100
            count = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
            assert count == (len(sent),)  # the failed batch left nothing behind
            ballast.unlink()  # space returns
            sent += c.send_batch("q", [{"after": True}])
            c.tick("q", force=True)
            assert [m.msg_id for m in drain(c, "q", "c", page=5000)] == sent
    finally:
        server.destroy()
        subprocess.run(["umount", str(disk)], capture_output=True)
        shutil.rmtree(disk, ignore_errors=True)
