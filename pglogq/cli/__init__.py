"""The ``pglogq`` command line (click)."""

from pglogq.cli.main import main

__all__ = ["main"]
