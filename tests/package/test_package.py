"""What the package is: the library imports light, and its generated twins are up to date
(the shipped package is the product, not the harness)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tools import unasync


def test_generated_sync_client_is_up_to_date() -> None:
    if not (unasync.PKG / "client_async.py").exists():
        pytest.skip("no source checkout beside tests/ (CI's installed-wheel run): nothing to regenerate")
    assert unasync.main(["--check"]) == 0


def test_import_pglogq_loads_neither_click_nor_the_daemon() -> None:
    """``import pglogq`` (the library) pulls in no click, no CLI, no daemon process
    code and no metrics server; the in-process ticker engine is library API and may load."""
    code = (
        "import sys, pglogq\n"
        "banned = ('click', 'rich', 'prometheus_client', 'pglogq.cli', 'pglogq.tickerd.cli',"
        " 'pglogq.tickerd.daemon', 'pglogq.tickerd.metrics', 'pglogq.worker')\n"
        # a module or one of its submodules ('pglogq.client' is not 'pglogq.cli')
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in banned[:3]"
        " or any(m == b or m.startswith(b + '.') for b in banned))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "", f"import pglogq loaded: {done.stdout.strip()}"


def test_import_pglogq_loads_no_integration() -> None:
    """``import pglogq`` (and using the client and consumer) imports no framework nor
    tracing library: the integrations in pglogq.contrib load them only when imported."""
    code = (
        "import sys, pglogq\n"
        "pglogq.Consumer('postgresql:///x', 'q', 'c')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'sqlalchemy', 'opentelemetry',"
        " 'asyncpg', 'psycopg2') or m.startswith('pglogq.contrib'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "", f"import pglogq loaded: {done.stdout.strip()}"
