"""The side-by-side benchmark: pglogq beside the PostgreSQL ceiling and the alternatives, in one run.

``tests.harness.bench.command`` is the click command (run as
``python -m tests.harness.bench`` from the repository's root).  See docs/benchmarks/README.md.
"""

from tests.harness.bench.cli import command

__all__ = ["command"]
