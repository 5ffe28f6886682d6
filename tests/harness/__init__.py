"""Harnesses that live beside the tests, outside the shipped package: the side-by-side
benchmark against other queues (:mod:`tests.harness.bench`), the chaos harness
(:mod:`tests.harness.chaos`) and the measurement scripts (:mod:`tests.harness.measure`).

Run them from the repository's root with ``python -m tests.harness.<name>``; see
docs/CONTRIBUTING.md.  Their subprocesses get the root on ``PYTHONPATH`` (:func:`child_env`), so
they work from any working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (the folder holding ``tests/``)."""


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with the repository's root first on
    ``PYTHONPATH``, so that ``python -m tests.harness....`` works in a subprocess."""
    out = dict(os.environ if env is None else env)
    parts = [str(ROOT), *(p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p)]
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return out
