"""Fixtures: a real PgBouncer in transaction mode (tests/integrations).

``pgbouncer`` starts Debian's ``pgbouncer`` (apt-get install pgbouncer; .ci/run does) once per
session in front of the test server, with ``examples/_pgbouncer.py`` (the examples use the same
launcher): transaction pooling, a pool of 3 server connections per database and user,
``auth_type = trust``, a free port of 127.0.0.1; stopped at the end.  ``pooled_dsn`` is the
test's fresh database seen through it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

POOL_SIZE = 3
_LAUNCHER = Path(__file__).resolve().parents[2] / "examples" / "_pgbouncer.py"


def _launcher() -> Any:
    name = "pglogq_examples_pgbouncer"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _LAUNCHER)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def pgbouncer(server_dsn: str) -> Iterator[Any]:
    launcher = _launcher()
    if launcher.PgBouncer.executable() is None:
        if os.environ.get("PGLOGQ_REQUIRE_PGBOUNCER"):  # CI installs it: a skip there would hide the tests
            pytest.fail("pgbouncer is not installed and PGLOGQ_REQUIRE_PGBOUNCER is set")
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer)")
    bouncer = launcher.PgBouncer.start(server_dsn, pool_size=POOL_SIZE)
    yield bouncer
    bouncer.stop()


@pytest.fixture
def pooled_dsn(pgbouncer: Any, dsn: str) -> str:
    """The test's fresh database, through pgbouncer in transaction mode."""
    return str(pgbouncer.dsn(dsn))
