"""pglogq-ticker: ticks and maintenance for every queue; one active ticker per database.

* ``pglogq-ticker`` / ``pglogq ticker run`` (:data:`command`, :func:`main`): the daemon;
* :func:`start_ticker` / :func:`start_async_ticker`: the same engine in-process (a thread or an
  asyncio task) for small apps and tests;
* :func:`~pglogq.ticker.health.ticker_stalled`: "no ticker has ticked for too long" warnings.

See :mod:`pglogq.ticker.engine` for how ticking, maintenance, HA and faults work.
"""

from pglogq.ticker.cli import command, main
from pglogq.ticker.engine import Engine, State
from pglogq.ticker.health import ticker_stalled
from pglogq.ticker.inprocess import AsyncTickerHandle, TickerHandle, start_async_ticker, start_ticker
from pglogq.ticker.settings import Settings

__all__ = [
    "AsyncTickerHandle",
    "Engine",
    "Settings",
    "State",
    "TickerHandle",
    "command",
    "main",
    "start_async_ticker",
    "start_ticker",
    "ticker_stalled",
]
