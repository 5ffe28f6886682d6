"""Structured log lines: ``key=value`` (default) or one JSON object per line.

Code logs through :func:`emit` with an event name and fields; the formatter puts them after
the standard ones (time, level, logger, event, msg).  Plain ``logging`` calls work too.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER = logging.getLogger("pglogq.ticker")


def emit(level: int, event: str, msg: str, /, logger: logging.Logger = LOGGER, **fields: Any) -> None:
    """Log ``msg`` with a stable ``event`` name and ``fields`` (shown as key=value / JSON keys)."""
    logger.log(level, msg, extra={"pglogq_event": event, "pglogq_fields": fields})


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
    }
    event = getattr(record, "pglogq_event", None)
    if event:
        out["event"] = event
    out["msg"] = record.getMessage()
    out.update(getattr(record, "pglogq_fields", None) or {})
    if record.exc_info and record.exc_info[1] is not None:
        out["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
    return out


def _kv_value(value: Any) -> str:
    text = "" if value is None else str(value)
    if text and all(c.isalnum() or c in "-_.:/@+" for c in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str, ensure_ascii=False)


_HANDLER_FLAG = "_pglogq_ticker_handler"


def configure(level: str = "INFO", fmt: str = "kv") -> None:
    """Send pglogq's log lines to stderr in ``fmt`` at ``level`` (idempotent; used by the daemon)."""
    root = logging.getLogger("pglogq")
    for h in list(root.handlers):
        if getattr(h, _HANDLER_FLAG, False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    setattr(handler, _HANDLER_FLAG, True)
    root.addHandler(handler)
    root.setLevel(level.upper())
    root.propagate = False
