"""The record files the chaos processes write, and their reader.

Every process appends tab-separated lines to its own file with unbuffered ``os.write`` on an
``O_APPEND`` descriptor, so a SIGKILL loses nothing already written.  Records:

* ``invoke <id>`` — a producer is about to send event ``id`` (``producer:seq``);
* ``ok <id>`` — the send committed; ``fail <id>`` — it certainly did not;
  ``info <id>`` — indeterminate (the connection died after the statement or COMMIT was sent);
  an ``invoke`` without an outcome (the producer was killed) is indeterminate too;
* ``deliver <id> <batch> <consumer> <worker> <retry_count>`` — written *before* the ack; in the
  ``keyed`` mode three more fields: ``<page> <key> <kseq>`` (the page record's id, the event's
  key and its sequence number within the key; ``-`` for an unkeyed event);
* ``page <page> <consumer> <worker> <called> <returned> <committed>`` — keyed mode, written before
  the page's ``deliver`` records: when the receive was called and when it returned
  (``time.monotonic()``: CLOCK_MONOTONIC, one clock for every process of the machine), and
  whether the receive ran in its own transaction (1) or in one that is rolled back (0: the page
  was never handed out, see the consumer's idle step);
* ``done <page> <time>`` — keyed mode: the handlers of the page finished (written before the
  nacks and the ack are sent; a page without ``done`` was in flight until its process died);
* ``fault <kind>`` — a fault a client process injected on itself (e.g. a tiny timeout);
* ``crash <shard> <down> <up>`` — sharded mode, the harness's own file: a shard's server was
  stopped immediately at ``down`` and answered again at ``up`` (CLOCK_MONOTONIC);
* ``kill <process> <pid> <time>`` — sharded mode, the harness's file: it SIGKILLed that process;
* ``skip <id> <consumer> <within>`` — a retention pass made the consumer skip event ``id``
  (``within`` = 1: the tick that first made it visible was made at or after the pass's limit,
  ``skipped_at - max_consumer_lag``, both by the server's clock, so skipping it was wrong).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path


class Recorder:
    """Appends records to one file; safe against SIGKILL of the writing process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, *fields: object) -> None:
        os.write(self._fd, ("\t".join(str(f) for f in fields) + "\n").encode())

    def write_many(self, lines: list[tuple[object, ...]]) -> None:
        if lines:
            os.write(self._fd, "".join("\t".join(str(f) for f in ln) + "\n" for ln in lines).encode())

    def close(self) -> None:
        os.close(self._fd)


# the number of fields of each record kind (a torn line has fewer)
_FIELDS: dict[str, tuple[int, ...]] = {
    "invoke": (2,), "ok": (2,), "fail": (2,), "info": (2,), "fault": (2,),
    "deliver": (6, 9), "skip": (4,), "page": (7,), "done": (3,), "crash": (4,), "kill": (4,), "exit": (2,),
}


def read_records(directory: Path, prefix: str) -> Iterator[list[str]]:
    """Every record of every ``prefix*.log`` file in ``directory``; a torn last line is skipped."""
    for path in sorted(directory.glob(f"{prefix}*.log")):
        yield from read_file(path)


def read_file(path: Path) -> Iterator[list[str]]:
    """The records of one file, in the order they were written; a torn last line is skipped."""
    data = path.read_text(encoding="utf-8", errors="replace")
    for line in data.split("\n")[:-1]:  # the last piece: "" or a torn line
        if line:
            fields = line.split("\t")
            if len(fields) in _FIELDS.get(fields[0], ()):
                yield fields


def is_killer(ev_id: str) -> bool:
    """A few ids of producer p1 (sequence numbers 300, 2800, 5300, ...) are "killers": the
    consumer process that starts handling one dies on the spot (``os._exit``), every time.  Each
    must end in every subscriber's dead-letter queue after ``max_retries`` + 1 deliveries (plus the
    halvings that make it stand alone), not come back forever."""
    name, _, seq = ev_id.partition(":")
    return name == "p1" and seq.isdigit() and int(seq) % 2500 == 300


def is_poison(ev_id: str) -> bool:
    """About 2 % of the ids are "poison": every consumer nacks them until they are dead."""
    return zlib.crc32(ev_id.encode()) % 50 == 0
