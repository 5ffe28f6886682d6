"""The ticker daemon (``pglogq-ticker``): ticks and maintenance for every queue; one active
ticker per database.

This package is the daemon's code; the deployment files (systemd unit, Containerfile,
``pg_cron.sql``) are in the repository's top-level ``ticker/`` folder.

* ``pglogq-ticker`` / ``pglogq ticker run``: the daemon (:mod:`pglogq.tickerd.cli`, which
  imports click; it is not imported by ``import pglogq`` nor by this package);
* :func:`start_ticker` / :func:`start_async_ticker`: the same engine in-process (a thread or an
  asyncio task) for small apps and tests;
* :func:`~pglogq.tickerd.health.ticker_stalled`: "no ticker has ticked for too long" warnings.

See :mod:`pglogq.tickerd.engine` for how ticking, maintenance, HA and faults work.
"""

from pglogq.tickerd.engine import Engine, State
from pglogq.tickerd.health import ticker_stalled
from pglogq.tickerd.inprocess import AsyncTickerHandle, TickerHandle, start_async_ticker, start_ticker
from pglogq.tickerd.settings import Settings

__all__ = [
    "AsyncTickerHandle",
    "Engine",
    "Settings",
    "State",
    "TickerHandle",
    "start_async_ticker",
    "start_ticker",
    "ticker_stalled",
]
