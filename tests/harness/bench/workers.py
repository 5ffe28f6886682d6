"""Imported once by every spawned worker process, so that no timed run pays for imports."""

from __future__ import annotations

import contextlib

import tests.harness.bench.systems  # noqa: F401

for _mod in ("redis", "pika", "pgqueuer.qm", "procrastinate"):
    with contextlib.suppress(ImportError):
        __import__(_mod)
