"""JSON as text: what the command line reads and prints is never decoded into Python values.

Payloads and headers go through the CLI as JSON *text*, so that what PostgreSQL stores as
``jsonb`` is printed exactly (integers beyond 64 bits, numbers beyond double range, ``1.10``,
nesting deeper than Python's recursion limit) and what the user types is sent exactly:

- :func:`register_raw_loaders` makes a connection return ``json``/``jsonb`` columns as
  :class:`RawJson` (the server's text), never decoded;
- :func:`dumps` writes a JSON document in which every :class:`RawJson` is spliced as is;
- :func:`check` validates one JSON text the way PostgreSQL will (``NaN``, ``Infinity`` and
  trailing garbage are refused) before anything is sent.
"""

from __future__ import annotations

import json
import re
import secrets
from decimal import Decimal
from typing import Any

import orjson
import psycopg
from psycopg.adapt import Loader


class RawJson(str):
    """JSON text as the server printed it (a payload, headers); printed as is, never decoded."""

    __slots__ = ()


class _RawJsonLoader(Loader):
    def load(self, data: Any) -> RawJson:
        return RawJson(compact(bytes(data).decode("utf-8")))


class _RawJsonbBinaryLoader(Loader):
    format = psycopg.pq.Format.BINARY

    def load(self, data: Any) -> RawJson:
        raw = bytes(data)
        # binary jsonb: a version byte (1) then the text
        return RawJson(compact(raw[1:].decode("utf-8")))


def register_raw_loaders(conn: psycopg.Connection[Any]) -> None:
    """``json``/``jsonb`` values read on ``conn`` come back as :class:`RawJson`."""
    for name in ("json", "jsonb"):
        conn.adapters.register_loader(name, _RawJsonLoader)
    conn.adapters.register_loader("jsonb", _RawJsonbBinaryLoader)


_TOKENS = re.compile(r'("(?:[^"\\]|\\.)*")|[ \t\r\n]+')
# what json.dumps escapes beyond the control characters: every non-ASCII character, and DEL
_NON_ASCII = re.compile(r"[^\x00-\x7e]")


def compact(text: str) -> str:
    """JSON text without the whitespace between tokens (strings are kept exactly)."""
    return _TOKENS.sub(lambda m: m.group(1) or "", text)


def ascii_only(text: str) -> str:
    """JSON text with every non-ASCII character (and DEL) written as a ``\\uXXXX`` escape, as
    ``json.dumps`` writes them (same value)."""
    return _NON_ASCII.sub(lambda m: json.dumps(m.group())[1:-1], text)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (PostgreSQL refuses it)")


def check(text: str) -> str:
    """``text`` if it is one JSON value PostgreSQL accepts, else :class:`ValueError` saying why.

    Numbers are not converted (no precision or digit limit applies).  A document nested deeper
    than Python can walk is left to the server to judge."""
    try:
        json.loads(text, parse_constant=_refuse_constant, parse_int=str, parse_float=str)
    except json.JSONDecodeError as exc:
        where = f"character {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno}, character {exc.colno}"
        raise ValueError(f"{exc.msg} ({where})") from exc
    except RecursionError:
        pass
    return text.strip()


_PLAIN = frozenset({str, int, bool})  # exactly these types: written by json.dumps as they are


def _prepare(value: Any, raws: list[str], token: str) -> Any:
    """``value`` ready for ``json.dumps``: each RawJson and finite Decimal replaced by a token
    string (its text kept in ``raws``), each non-finite float by None."""
    if value is None or type(value) in _PLAIN:
        return value
    if isinstance(value, float):
        return None if value != value or value in (float("inf"), float("-inf")) else value
    if isinstance(value, RawJson) or (isinstance(value, Decimal) and value.is_finite()):
        raws.append(str(value))
        return f"{token}{len(raws) - 1}"
    if isinstance(value, dict):
        return {k: _prepare(v, raws, token) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_prepare(v, raws, token) for v in value]
    return value


def dumps(value: Any, *, indent: int | None = None) -> str:
    """``json.dumps`` that splices each :class:`RawJson` (and finite Decimal) as is.

    Never writes ``NaN`` or ``Infinity``: a non-finite float becomes ``null``.  Only ASCII, as
    ``json.dumps`` writes it (every other character as a ``\\uXXXX`` escape)."""
    raws: list[str] = []
    token = f"\x01rawjson-{secrets.token_hex(8)}-"
    ready = _prepare(value, raws, token)
    text = _encoded(ready, indent)
    if not raws:
        return text
    # each token string, as it was written, replaced by its text in one pass
    written = re.compile(re.escape(json.dumps(token)[:-1]) + r'([0-9]+)"')
    return written.sub(lambda m: ascii_only(raws[int(m.group(1))]), text)


def _encoded(ready: Any, indent: int | None) -> str:
    """``ready`` (what _prepare made) as JSON text.  orjson where it can write it: Python's
    encoder with an indent is its pure-Python one (``status --json`` at 1,000 queues, 1 MB:
    95 ms).  Python's where orjson refuses (an integer beyond 64
    bits, a lone surrogate, nesting deeper than it goes) or where its layout differs (an indent
    other than 2)."""
    if indent in (None, 2):
        try:
            out = orjson.dumps(ready, option=orjson.OPT_INDENT_2 if indent else 0)
        except (orjson.JSONEncodeError, TypeError):
            pass
        else:
            return ascii_only(out.decode("utf-8"))
    return json.dumps(ready, indent=indent, separators=None if indent else (",", ":"))
