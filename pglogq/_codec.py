"""Exact JSON between Python and jsonb (the checks of arguments are in :mod:`pglogq._args`).

Shared by :class:`AsyncClient` and the generated :class:`Client` (no I/O here).

**Decoding** (what ``receive``, ``dlq_inspect`` and ``in_flight`` return).  The client reads
jsonb as text and decodes it itself, whatever the connection's loaders, with this rule:

- a JSON integer (no fraction, no exponent) becomes an ``int``, exactly, however large (beyond
  Python's ``int_max_str_digits`` it becomes a ``Decimal``, still exact);
- a number with a fraction or exponent becomes a ``float`` when the float's shortest ``repr``
  denotes the same number, else a ``decimal.Decimal`` holding it exactly (more than 17 significant
  digits, beyond the double range such as ``1.5e400``'s neighbours, or below it such as ``1e-400``);
- jsonb keeps numbers as ``numeric`` and prints them without exponent: ``1e20`` written in SQL
  comes back as the ``int`` ``100000000000000000000``; a Python float is therefore sent with a
  fraction (``1e20`` as ``100000000000000000000.0``) so that it comes back as the same float.
  ``-0.0`` comes back as ``0.0`` (numeric has no negative zero), and the trailing zeros jsonb keeps
  (``1.50``) are lost by ``float``.
- orjson is used as a fast path only where it is exact (no digit run longer than 16 characters in
  the text and nesting within its limit); everything else goes through :mod:`json` with the rule
  above.  A payload that still cannot be decoded (nesting beyond what Python's recursive decoder
  takes) becomes an :class:`~pglogq.models.Undecodable` and the message's ``decode_error`` says why.

**Encoding** (``send``, ``send_batch``, ``headers``, ``counters``): :mod:`json` with ``NaN`` and
``Infinity`` refused (they are not JSON: :class:`InvalidPayload`), ``Decimal`` written exactly.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from decimal import Decimal
from typing import Any

import orjson
from psycopg.types.json import Jsonb

from pglogq.errors import InvalidPayload
from pglogq.models import Undecodable

# -- decoding -------------------------------------------------------------------------------

_NOT_NUMBER = bytes(0 if 48 <= i <= 57 or i == 46 else 1 for i in range(256))
"""A translation table: digits and the dot to 0, every other byte to 1."""

_LONG_RUN = b"\x00" * 17
"""After translation: a run of 17 digits or dots, a number orjson might not decode exactly (more
than 15 significant digits or > 64 bits).  ``bytes.translate`` and ``in`` are C loops: about
twenty times cheaper than a regular expression searching for the same run."""


def orjson_exact(*texts: str) -> bool:
    """True when orjson decodes every one of ``texts`` exactly (no digit run of 17 or more)."""
    joined = "\x01".join(texts) if len(texts) != 1 else texts[0]
    return _LONG_RUN not in joined.encode("utf-8", "surrogatepass").translate(_NOT_NUMBER)


def _exact_float(text: str) -> float | Decimal:
    f = float(text)
    if math.isfinite(f) and Decimal(repr(f)) == Decimal(text):
        return f
    return Decimal(text)


def _exact_int(text: str) -> int | Decimal:
    try:
        return int(text)
    except ValueError:  # beyond sys.get_int_max_str_digits()
        return Decimal(text)


def loads(text: str) -> Any:
    """Decode JSON text exactly (see the module's rule); raises ValueError or RecursionError."""
    if orjson_exact(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # nesting beyond orjson's limit, or a number it cannot hold: the exact path
    return json.loads(text, parse_float=_exact_float, parse_int=_exact_int)


def decode(text: str | None, what: str, errors: list[str]) -> Any:
    """``loads(text)``; on failure an :class:`Undecodable`, and the reason appended to ``errors``."""
    if text is None:
        return None
    try:
        return loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:
        reason = f"{what}: {type(exc).__name__}: {exc}"[:500]
        errors.append(reason)
        return Undecodable(text, reason)


# -- encoding -------------------------------------------------------------------------------

_TOKEN = f"\x00pglogq-{secrets.token_hex(8)}:"
_TOKEN_RE = re.compile('"' + re.escape(json.dumps(_TOKEN)[1:-1]) + r'([^"]*)"')


_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""A \\u0000 escape (not an escaped backslash followed by "u0000")."""


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"Out of range value is not JSON compliant: Decimal({str(value)!r})")
        return _TOKEN + str(value)  # written as a bare number below
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_STRING_OR_BIG_FLOAT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9]+(?:\.[0-9]+)?e\+[0-9]+)')


def _plain_float(m: re.Match[str]) -> str:
    # json writes a float >= 1e16 as 1e+16; jsonb would print it back as the integer
    # 10000000000000000, which decodes to an int: written as 10000000000000000.0 it stays a float
    number = m.group(1)
    return m.group(0) if number is None else format(Decimal(number), "f") + ".0"


_ENCODER = json.JSONEncoder(allow_nan=False, default=_default, ensure_ascii=False, separators=(",", ":"))
"""What ``json.dumps`` with these options would build on every call (it keeps no state between calls)."""


def dumps(value: Any, what: str = "payload") -> str:
    """JSON text of ``value``; raises :class:`InvalidPayload` for what JSON cannot hold."""
    try:
        text = _ENCODER.encode(value)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidPayload(f"invalid {what}: {type(exc).__name__}: {exc}") from exc
    # each search below runs only when a single character it needs is in the text: a search for
    # one character is a memchr, several times faster than one for a string (which showed on the
    # 150 kB of a batch of 1,000 events: three string searches cost 0.7 times the encoding)
    if "+" in text and "e+" in text:
        text = _STRING_OR_BIG_FLOAT.sub(_plain_float, text)
    if "\\" in text:  # the Decimal token and a NUL are both written as a \u0000 escape
        if "\\u0000pglogq-" in text:
            text = _TOKEN_RE.sub(lambda m: m.group(1), text)
        if "\\u0000" in text and _NUL_ESCAPE.search(text):
            raise InvalidPayload(f"invalid {what}: a string contains a NUL character (\\u0000), "
                                 "which jsonb cannot hold")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: not Unicode text
            raise InvalidPayload(f"invalid {what}: {exc}") from exc
    return text


def _raw(text: Any) -> str:
    return str(text)


def jsonb(value: Any, what: str = "payload") -> Jsonb:
    """A jsonb parameter holding ``value`` (serialised now, so errors come before any SQL)."""
    return Jsonb(dumps(value, what), dumps=_raw)


def jsonb_or_none(value: Any, what: str) -> Jsonb | None:
    return None if value is None else jsonb(value, what)
