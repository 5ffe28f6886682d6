"""What both clients receive, with no I/O: rows made into models (the checks of what they send
are in :mod:`pglogq._args`).

Shared by :mod:`pglogq.client_async` and its generated twin :mod:`pglogq.client` (one copy, not two).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar

import orjson

import pglogq._codec as v
from pglogq.models import Attempt, CaptureInfo, DeadLetter, InFlight, JobResult, JobState, Message, Schedule

T = TypeVar("T")
M = TypeVar("M", bound=Message)


def info(cls: type[T], row: Sequence[Any]) -> T:
    return cls(*row[: len(fields(cls))])  # type: ignore[arg-type]


def message(row: Sequence[Any], cls: type[M] = Message) -> M:  # type: ignore[assignment]
    errors: list[str] = []
    payload = v.decode(row[3], "payload", errors)
    headers = v.decode(row[4], "headers", errors) if row[4] is not None else None
    return cls(row[0], row[1], row[2], payload, headers, row[5], row[6], row[7], row[8],
               "; ".join(errors) if errors else None)


_EXACT_ROWS = 256
"""Rows checked at once by :func:`messages`: the text joined for a check stays a few dozen KB
(the check of a whole page of 10,000 joined, encoded and translated megabytes, which cost more
than the same checks in groups)."""


def messages(rows: Sequence[Sequence[Any]], cls: type[M] = Message) -> list[M]:  # type: ignore[assignment]
    """The rows of a page (``receive``), decoded; the same as ``[message(r) for r in rows]``.

    A check that orjson decodes the page exactly (no long digit run), a group of rows at a time,
    then orjson per event; a page with a long number, or an event orjson refuses, takes
    :func:`message`.  ``cls``: Message or a subclass of it (the consumer's deliveries)."""
    if not rows:
        return []
    for i in range(0, len(rows), _EXACT_ROWS):
        part = rows[i : i + _EXACT_ROWS]
        texts = [r[3] for r in part if r[3] is not None]
        texts.extend(r[4] for r in part if r[4] is not None)
        if texts and not v.orjson_exact(*texts):
            return [message(r, cls) for r in rows]
    # made from the row as it is (the columns are the fields, in order), then decoded in place:
    # a tenth cheaper per event than unpacking each row into the constructor's arguments
    out = [cls(*row) for row in rows]
    loads: Any = orjson.loads  # on the texts the rows hold (the fields' declared types are the results)
    for i, m in enumerate(out):
        try:
            if m.payload is not None:
                m.payload = loads(m.payload)
            if m.headers is not None:
                m.headers = loads(m.headers)
        except orjson.JSONDecodeError:  # nesting beyond orjson's limit: the exact path says why
            out[i] = message(rows[i], cls)
    return out


def dead_letter(row: Sequence[Any]) -> DeadLetter:
    errors: list[str] = []
    payload = v.decode(row[5], "payload", errors)
    headers = v.decode(row[6], "headers", errors)
    values = [*row[:5], payload, headers, *row[7:12], "; ".join(errors) if errors else None]
    return DeadLetter(*values)


def in_flight(row: Sequence[Any]) -> InFlight:
    errors: list[str] = []
    counters = v.decode(row[11], "counters", errors)
    values = [*row[:11], counters, "; ".join(errors) if errors else None, *row[12:14]]
    return InFlight(*values)


















def capture_info(row: Sequence[Any]) -> CaptureInfo:
    errors: list[str] = []
    cond = v.decode(row[6], "only_if", errors) if row[6] is not None else None
    return CaptureInfo(row[0], row[1], list(row[2]), row[3], row[4], row[5], cond)


def schedule(row: Sequence[Any]) -> Schedule:
    errors: list[str] = []
    payload = v.decode(row[4], "payload", errors)
    headers = v.decode(row[5], "headers", errors) if row[5] is not None else None
    values = [*row[:4], payload, headers, *row[6:14]]
    return Schedule(*values)


_FRACTION = re.compile(r"\.(\d{1,6})")


def _moment(text: str) -> datetime:
    """A timestamptz of jsonb (``2026-01-02T03:04:05.12+00:00``) as an aware datetime (Python
    3.10's ``fromisoformat`` wants six digits of fraction: padded)."""
    return datetime.fromisoformat(_FRACTION.sub(lambda m: "." + m.group(1).ljust(6, "0"), text, count=1))


def _result(text: str | None) -> Any:
    errors: list[str] = []
    return v.decode(text, "result", errors)


def job_state(row: Sequence[Any]) -> JobState:
    """A row of LOOKUP or JOBS: the outcome log's columns (finished_at, result, history) last."""
    base = list(row[:17])
    result = _result(row[17]) if len(row) > 17 else None
    history = []
    if len(row) > 18 and row[18]:
        for h in orjson.loads(row[18]):
            history.append(Attempt(
                h["attempt"], h["outcome"], h.get("worker"),
                _moment(h["started_at"]) if h.get("started_at") else None,
                _moment(h["finished_at"]), h.get("error"),
            ))
    return JobState(*base, result=result, history=history)  # type: ignore[misc]


def outcome_note(payload: str, consumer: str, msg_id: int) -> bool:
    """Whether a ``NOTIFY "pglogq.outcome.<queue>"`` (payload "<consumer> <least id> <greatest
    id>" of the outcomes recorded, see record_outcomes) may concern ``msg_id`` of ``consumer``."""
    name, _, bounds = payload.partition(" ")
    if name != consumer:
        return False
    lo, _, hi = bounds.partition(" ")
    try:
        return int(lo) <= msg_id <= int(hi)
    except ValueError:
        return True  # not the expected form: look again rather than miss it


def job_result(queue: str, consumer: str, msg_id: int, row: Sequence[Any]) -> JobResult:
    """A row of RESULT."""
    return JobResult(queue, consumer, msg_id, row[0], bool(row[1]), row[2], row[3], row[4], row[5], row[6],
                     _result(row[7]))
