"""A minimal ticker loop, used by the harness when the ``pglogq-ticker`` daemon is missing.

``python -m pglogq.chaos.ticker_loop --dsn DSN``: ``pglogq.ticker()`` every 20 ms and the due
maintenance steps (``maint_operations`` / ``maint_run``, each in its own transaction) every
200 ms; reconnects after any error.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from pglogq.chaos._proc import StopFlag, close_quietly, connect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dsn", required=True)
    a = ap.parse_args()
    flag = StopFlag()
    conn: psycopg.Connection[Any] | None = None
    last_maint = 0.0
    while not flag.stop:
        try:
            if conn is None or conn.closed or conn.broken:
                conn = connect(a.dsn)
            conn.execute("SELECT pglogq.ticker()")
            if time.monotonic() - last_maint > 0.2:
                ops = conn.execute("SELECT op, queue_name FROM pglogq.maint_operations()").fetchall()
                for op, queue in ops:
                    conn.execute("SELECT pglogq.maint_run(%s, %s)", (op, queue))
                last_maint = time.monotonic()
        except psycopg.Error:
            close_quietly(conn)
            conn = None
            flag.sleep(0.1)
            continue
        flag.sleep(0.02)
    close_quietly(conn)


if __name__ == "__main__":
    main()
