"""The ticker during the timed pglogq scenarios: the project's in-process ticker
(``pglogq.start_ticker``, the daemon's engine)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pglogq


@contextmanager
def ticker_running(dsn: str, **overrides: Any) -> Iterator[str]:
    """Run a ticker for the bench database; yields a description of what runs."""
    handle = pglogq.start_ticker(dsn, **overrides)
    try:
        handle.wait_active(30)
        yield "pglogq.start_ticker (in-process daemon engine)" + (f" {overrides}" if overrides else "")
    finally:
        handle.stop()
