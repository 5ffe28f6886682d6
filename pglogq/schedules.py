"""Schedules: cron expressions, checked and evaluated with the cronsim library, and the ticker's step.

A schedule (``pglogq.schedule_add``) is a cron expression of five fields (minute hour
day-of-month month day-of-week), evaluated in UTC.  The SQL checks the expression's shape only;
the client checks it in full with :func:`check_cron` before calling it, and the ticker, the one
place where due times are computed, runs :func:`fire_due` in each maintenance pass: for the
schedules whose next due time has come (``pglogq.schedule_due``, the longest due first, at most
:data:`PER_PASS` due times a pass) it calls ``pglogq.schedule_fire``, which sends the event and
moves the schedule on in one transaction (exactly once per due time, whatever number of tickers
run; see docs/how-to/schedules.md).

>>> from datetime import datetime, timezone
>>> next_due("*/15 * * * *", datetime(2026, 1, 1, 8, 7, tzinfo=timezone.utc))
datetime.datetime(2026, 1, 1, 8, 15, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from cronsim import CronSim, CronSimError
from typing_extensions import LiteralString

from pglogq.errors import InvalidSchedule, translate

log = logging.getLogger("pglogq.schedules")

MAX_STEPS = 100
"""Due times one schedule may handle in one pass (a long catch-up goes on in the next passes)."""

MISSED_AFTER = timedelta(minutes=1)
"""A due time seen later than this is missed (the SQL's rule, in ``schedule_fire``)."""

PER_PASS = 200
"""Due times one pass handles at most, all schedules together (the rest go on in the next passes,
the longest due first), so that the maintenance steps after it never wait behind a crowd of
schedules falling due at once."""

SCHEDULES_DUE: LiteralString = (
    "SELECT queue, name, cron, missed, created_at, next_due, now FROM pglogq.schedule_due(%s)"
)
SCHEDULE_FIRE: LiteralString = "SELECT outcome, msg_id FROM pglogq.schedule_fire(%s, %s, %s, %s)"


def check_cron(expr: object) -> str:
    """The expression with single spaces, or :class:`InvalidSchedule` when cronsim refuses it."""
    if not isinstance(expr, str):
        raise InvalidSchedule(f"invalid cron expression {expr!r}: a string of five fields is expected")
    text = " ".join(expr.split())
    if len(text.split(" ")) != 5 or len(text) > 200:
        raise InvalidSchedule(
            f"invalid cron expression {expr[:80]!r}: five fields are expected "
            "(minute hour day-of-month month day-of-week, e.g. '*/5 * * * *')"
        )
    try:
        next(CronSim(text, datetime(2000, 1, 1, tzinfo=timezone.utc)))
    except (CronSimError, StopIteration) as exc:
        raise InvalidSchedule(f"invalid cron expression {expr[:80]!r}: {exc or 'it never matches'}") from exc
    return text


def next_due(expr: str, after: datetime) -> datetime:
    """The first due time of ``expr`` strictly after ``after`` (evaluated in UTC)."""
    try:
        return next(CronSim(expr, after.astimezone(timezone.utc)))
    except (CronSimError, StopIteration) as exc:
        raise InvalidSchedule(f"invalid cron expression {expr[:80]!r}: {exc or 'it never matches'}") from exc


async def fire_due(conn: psycopg.AsyncConnection[Any], limit: int = PER_PASS) -> dict[str, int]:
    """Send the due events of the schedules (autocommit ``conn``: one transaction per due time),
    at most ``limit`` due times (and plannings) in this call, the longest due first.

    Returns ``{"sent": n, "skipped": n, "planned": n}``.  A schedule whose expression cronsim
    refuses (added through SQL) is left unplanned and logged; the others go on."""
    counts = {"sent": 0, "skipped": 0, "planned": 0}
    try:
        rows = await (await conn.execute(SCHEDULES_DUE, (limit,))).fetchall()
    except psycopg.errors.UndefinedFunction:
        return counts  # a schema without schedules (older than migration 0016)
    budget = limit
    for queue, name, cron, missed, created_at, due, now in rows:
        if budget <= 0:
            break  # the rest is still due: the next pass takes it first (it is the longest due)
        try:
            if due is None:
                first = next_due(cron, created_at)
                budget -= 1
                if await _fire(conn, queue, name, None, first, counts) != "planned":
                    continue
                due = first
            for _ in range(MAX_STEPS):
                if due > now or budget <= 0:
                    break
                nxt = next_due(cron, due)
                if missed == "skip" and nxt < now - MISSED_AFTER:
                    # every due time up to a minute ago is missed: skip them all in one step, to
                    # the first one that is not (computed directly: a year of minutes is no loop)
                    nxt = next_due(cron, now - MISSED_AFTER - timedelta(microseconds=1))
                budget -= 1
                if await _fire(conn, queue, name, due, nxt, counts) == "stale":
                    break
                due = nxt
        except InvalidSchedule as exc:
            log.error("schedule %s of queue %s cannot be planned: %s", name, queue, exc.message)
    return counts


async def _fire(
    conn: psycopg.AsyncConnection[Any], queue: str, name: str, due: datetime | None, nxt: datetime,
    counts: dict[str, int],
) -> str:
    try:
        row = await (await conn.execute(SCHEDULE_FIRE, (queue, name, due, nxt))).fetchone()
    except psycopg.Error as exc:
        err = translate(exc)
        if err is not exc and getattr(err, "sqlstate", None) == "PQ001":
            return "stale"  # the queue was dropped meanwhile
        raise
    outcome = str(row[0]) if row else "stale"
    if outcome in counts:
        counts[outcome] += 1
    return outcome
