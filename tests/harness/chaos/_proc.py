"""Helpers shared by the chaos client processes: connections, outcome classes, stop signals."""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any

import psycopg

# a connection error, a server shutdown, a cancel or an internal error leaves the outcome unknown
_UNKNOWN_CLASSES = ("08", "57", "XX")


def definite_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by an autocommit statement or a COMMIT, proves it did not commit.

    A cancel (57014) does not: the CI run of 2026-12-03 (seed 7) had a send recorded as failed
    by 57014 that every subscriber received, i.e. the cancel was reported after the statement's
    commit.  It counts as an unknown outcome, like a lost connection; a statement cancelled
    inside an explicit transaction that is then rolled back is a failure (in_transaction)."""
    if not isinstance(exc, psycopg.Error):
        return False
    code = exc.sqlstate
    if code is None:
        return False
    return code[:2] not in _UNKNOWN_CLASSES


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
