"""``pglogq bench``: pglogq beside the PostgreSQL ceiling and the alternatives, in one run.

``pglogq.bench.command`` is the click command (mounted as ``pglogq bench``; also
``python -m pglogq.bench``).  See docs/benchmarks/README.md.
"""

from pglogq.bench.cli import command

__all__ = ["command"]
