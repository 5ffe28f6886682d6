"""Helpers shared by the chaos client processes: connections, outcome classes, stop signals."""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any

import psycopg

# a connection error, a server shutdown or an internal error leaves the outcome unknown
_UNKNOWN_CLASSES = ("08", "57", "XX")
QUERY_CANCELED = "57014"


def definite_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a statement, proves that statement did not commit."""
    if not isinstance(exc, psycopg.Error):
        return False
    code = exc.sqlstate
    if code is None:
        return False
    return code == QUERY_CANCELED or code[:2] not in _UNKNOWN_CLASSES


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


class StopFlag:
    """Set by SIGTERM / SIGINT: finish the current operation, then exit."""

    def __init__(self) -> None:
        self.stop = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_: object) -> None:
        self.stop = True

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stop and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))


def close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):  # a broken connection may fail to close
            conn.close()
