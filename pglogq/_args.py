"""Every check of a caller's argument, made before any SQL, in one place: what the clients
(:mod:`pglogq.client_async` and its generated twin), the sharded clients and the framework
integrations (:mod:`pglogq.contrib`) refuse, with which error and which message.  No I/O.

A check names what it checks (``what``) so that the message says which argument was wrong, and
raises the error the server would give for such a value where the server could not even be
asked (an int beyond its SQL type is an unknown batch, not a driver error).  The options of an
event (``send``'s and ``send_batch``'s keyword arguments) are one type here, :class:`SendOptions`
and :class:`SendBatchOptions`, so that the clients and integrations that pass them on share one
list of names.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypedDict

import pglogq._codec as _codec
from pglogq.errors import (
    InvalidArgument,
    InvalidCaptureColumns,
    InvalidCaptureOption,
    InvalidDelay,
    InvalidInput,
    InvalidName,
    InvalidPayload,
    PglogqError,
    SeekOutOfRange,
    StaleBatch,
    UnknownBatch,
)
from pglogq.models import Message


class EventOptions(TypedDict, total=False):
    """The options every event of a send takes, all optional: ``type`` (str or None), ``headers``
    (a JSON object or None), ``priority`` (0..32767, default 100), ``deliver_at`` (an aware
    datetime or None), ``delay`` (a timedelta or None); meaning and checks: ``Client.send``."""

    type: str | None
    """The event's type (None: untyped); a str of at most 255 bytes."""
    headers: dict[str, Any] | None
    """A JSON object stored beside the payload (tracing puts its context here)."""
    priority: int
    """0..32767, higher delivered first when a backlog exists; default 100."""
    deliver_at: datetime | None
    """No delivery before this moment (a timezone-aware datetime)."""
    delay: timedelta | None
    """No delivery before this long from now."""


class SendOptions(EventOptions, total=False):
    """The keyword arguments of ``send`` besides ``conn``: :class:`EventOptions` and
    ``idempotency_key``, ``key`` (each a str or None).  The sharded clients and the Django and
    SQLAlchemy integrations take them as ``**options`` (a name not listed here is a TypeError)
    and check them as :meth:`Client.send` does, with the same errors."""

    idempotency_key: str | None
    """The same key within the queue's window sends once."""
    key: str | None
    """The event key (1 to 255 UTF-8 bytes): one partition, and one shard, per key."""


class SendBatchOptions(EventOptions, total=False):
    """The keyword arguments of ``send_batch`` besides ``conn``: :class:`EventOptions` for every
    event, and ``idempotency_keys``, ``keys`` (a sequence with one per payload, or None); see
    :meth:`Client.send_batch`."""

    idempotency_keys: Sequence[str | None] | None
    keys: Sequence[str] | None


SEND_OPTIONS = frozenset(SendOptions.__annotations__) | frozenset(EventOptions.__annotations__)
SEND_BATCH_OPTIONS = frozenset(SendBatchOptions.__annotations__) | frozenset(EventOptions.__annotations__)


def known_options(function: str, options: Mapping[str, Any], names: frozenset[str]) -> None:
    """TypeError for a keyword the function (its ``__qualname__``) does not take, worded as
    Python words it for a function that names its keyword arguments (``**options`` would accept
    any name)."""
    for option in options:
        if option not in names:
            raise TypeError(f"{function}() got an unexpected keyword argument {option!r}")


def idempotency_key_list(idempotency_keys: Any) -> list[Any] | None:
    """``send_batch``'s ``idempotency_keys`` as a list, not checked one by one: a lone str (or
    bytes) is refused rather than read as a sequence of one-character keys."""
    if idempotency_keys is None:
        return None
    if isinstance(idempotency_keys, (str, bytes)):
        raise InvalidArgument("idempotency_keys must be a sequence of keys, not a single str")
    return list(idempotency_keys)


def idempotency_keys(value: Any) -> list[str | None] | None:
    """``send_batch``'s ``idempotency_keys``, each checked as an idempotency key."""
    keys = idempotency_key_list(value)
    return None if keys is None else [text(k, "idempotency key") for k in keys]


INT2 = (-(2**15), 2**15 - 1)
INT4 = (-(2**31), 2**31 - 1)
INT8 = (-(2**63), 2**63 - 1)


def payload_list(payloads: Any) -> list[Any]:
    """``send_batch``'s payloads as a list; refuses a str, bytes or mapping (not a list of events)."""
    if isinstance(payloads, (str, bytes, bytearray, memoryview, Mapping)):
        raise InvalidPayload(f"payloads must be a sequence of events, not {type(payloads).__name__}")
    try:
        return list(payloads)
    except TypeError as exc:
        raise InvalidPayload(f"payloads must be a sequence of events, not {type(payloads).__name__}") from exc


def integer(
    value: Any,
    what: str,
    bounds: tuple[int, int],
    out_of_range: Callable[[int], PglogqError] | None = None,
    *,
    null: bool = True,
) -> int | None:
    """``value`` as a plain int within the SQL type's ``bounds`` (None passes when ``null``).

    A bool, float or str is refused with :class:`InvalidArgument`; an int outside the bounds
    with ``out_of_range(value)`` — the error the server gives for a value it cannot know."""
    if value is None and null:
        return None
    if isinstance(value, bool) or value is None:
        raise InvalidArgument(f"invalid {what}: an integer is expected, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgument(f"invalid {what}: an integer is expected, got {type(value).__name__}") from None
    if not bounds[0] <= number <= bounds[1]:
        if out_of_range is not None:
            raise out_of_range(number)
        raise InvalidArgument(f"invalid {what} {number}: out of range {bounds[0]}..{bounds[1]}")
    return number


def text(value: Any, what: str, error: type[PglogqError] = InvalidArgument, *, null: bool = True) -> str | None:
    """``value`` as a str PostgreSQL can store (no NUL character); None passes when ``null``."""
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise error(f"invalid {what}: a str is expected, got {type(value).__name__}")
    if "\x00" in value:
        raise error(f"invalid {what}: contains a NUL character, which PostgreSQL text cannot hold")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: not Unicode text
            raise error(f"invalid {what}: {exc}") from None
    return value


def name(value: Any, kind: str) -> str | None:
    """A queue or consumer name: a str (NULL goes to the server, which refuses it)."""
    return text(value, f"{kind} name", InvalidName)


def interval(value: Any, what: str, error: type[InvalidInput]) -> timedelta | None:
    if value is None or (isinstance(value, timedelta) and not isinstance(value, bool)):
        return value
    raise error(f"invalid {what}: a datetime.timedelta is expected, got {type(value).__name__}")


def moment(value: Any, what: str, error: type[InvalidInput]) -> datetime | None:
    """An aware datetime: a naive one would be read in the connection's TimeZone setting."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise error(f"invalid {what}: a datetime.datetime is expected, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise error(f"invalid {what}: a timezone-aware datetime is expected (a naive one depends on the "
                    "session's TimeZone); use datetime.now(timezone.utc) or .astimezone()")
    return value


def checked_batch_id(batch_id: Any) -> int | None:
    return integer(batch_id, "batch id", INT8, lambda n: UnknownBatch(f"unknown batch {n}"))


def flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"invalid {what}: True or False is expected, got {value!r}")
    return value


def position(to: Any, queue: str | None) -> str | None:
    if to is None:
        return None
    if isinstance(to, str):
        return text(to, "seek position")
    if isinstance(to, datetime):
        when = moment(to, "seek position", InvalidArgument)
        assert when is not None
        return when.isoformat()
    tick = integer(
        to, "seek position", INT8, lambda n: SeekOutOfRange(f'tick {n} of queue "{queue}" is not kept'), null=False
    )
    return str(tick)


def event_options(
    type: Any, headers: Any, priority: Any, deliver_at: Any, delay: Any
) -> tuple[Any, ...]:
    """send's and send_batch's shared options (:class:`EventOptions`), checked: (type, headers as
    jsonb, priority, deliver_at, delay)."""
    return (
        text(type, "event type", InvalidPayload),
        _codec.jsonb_or_none(headers, "headers"),
        integer(priority, "priority", INT4,
                lambda n: InvalidArgument(f"invalid priority: {n} (use 0..32767, higher first)")),
        moment(deliver_at, "deliver_at", InvalidDelay),
        interval(delay, "delay", InvalidDelay),
    )


def ack_args(batch_id: Any, last: Any) -> tuple[int | None, Message | None]:
    if last is not None:
        if not isinstance(last, Message):
            raise InvalidArgument(f"last must be the page's last Message, got {type(last).__name__}")
        integer(last.msg_id, "message id", INT8,
                lambda n: StaleBatch(f"the page of batch {batch_id} ending at message {n} is not the current one"))
        text(last.txid, "txid")
    return checked_batch_id(batch_id), last


def seek_args(queue: Any, consumer: Any, to: Any, by_events: Any) -> tuple[Any, ...]:
    queue_name = name(queue, "queue")
    by = integer(by_events, "by_events", INT8,
                 lambda n: SeekOutOfRange(f'cannot move consumer "{consumer}" by {n} events'))
    return (queue_name, name(consumer, "consumer"), position(to, queue_name), by)


def columns(value: Sequence[str] | None, what: str) -> list[str] | None:
    """A column list of ``capture_table``: a sequence of str (a lone str is refused, not split)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise InvalidCaptureColumns(f"{what} must be a sequence of column names, not a single {type(value).__name__}")
    out: list[str] = []
    for col in value:
        checked = text(col, f"column name in {what}", InvalidCaptureColumns, null=False)
        assert checked is not None
        out.append(checked)
    return out


def only_if(value: Any) -> Any:
    """``capture_table``'s ``only_if``: a dict (the server checks it is a JSON object)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidCaptureOption(f"invalid only_if: a dict is expected, got {type(value).__name__}")
    try:
        return _codec.jsonb(value, "only_if")
    except InvalidPayload as exc:
        raise InvalidCaptureOption(exc.message) from exc
