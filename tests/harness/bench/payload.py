"""The one payload every system sends: a small JSON object of about 130 bytes."""

from __future__ import annotations

import json
from typing import Any

NOTE = "x" * 64


def make(seq: int, note: str = NOTE) -> dict[str, Any]:
    return {"seq": seq, "type": "order.created", "customer": 40_000 + seq % 997, "amount": 99.95, "note": note}


def encoded(seq: int) -> bytes:
    """The same payload as JSON bytes (for systems that carry bytes)."""
    return json.dumps(make(seq), separators=(",", ":")).encode()


def size() -> int:
    return len(encoded(123456))
