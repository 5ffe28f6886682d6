"""``send`` and ``send_batch`` as one SQL statement any PostgreSQL driver can run.

The framework integrations (Django, SQLAlchemy) call the SQL API through the framework's own
connection, so the event joins the application's transaction with no unwrapping.  Every
parameter is bound (never interpolated by us) and typed by a ``CAST`` in the statement, with
Python values every driver adapts the same way: JSON as text, ``int``, ``str``, a list of
``str``, ``datetime``, ``timedelta``.  The arguments are checked here exactly as
:meth:`pglogq.Client.send` checks them (same errors, before any SQL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pglogq._args as a
import pglogq._codec as v
from pglogq import _trace
from pglogq.errors import BY_SQLSTATE
from pglogq.keys import check_key, check_keys

Placeholder = Callable[[str], str]
"""How the driver writes a named parameter: ``lambda n: f"%({n})s"`` or ``lambda n: f":{n}"``."""


def pyformat(name: str) -> str:
    return f"%({name})s"


def colon(name: str) -> str:
    return f":{name}"


def _options(keys: str, keys_type: str, ph: Placeholder) -> str:
    return (
        f" type => CAST({ph('type')} AS pg_catalog.text),"
        f" headers => CAST({ph('headers')} AS pg_catalog.jsonb),"
        f" priority => CAST({ph('priority')} AS pg_catalog.int4),"
        f" {keys} => CAST({ph(keys)} AS {keys_type}),"
        f" deliver_at => CAST({ph('deliver_at')} AS pg_catalog.timestamptz),"
        f" delay => CAST({ph('delay')} AS pg_catalog.interval)"
    )


def send_sql(ph: Placeholder) -> str:
    """``pglogq.send``, or ``pglogq.send_keyed`` when the ``key`` parameter is not NULL (one
    statement: the CASE runs only the branch it takes)."""
    queue, payload = f"CAST({ph('queue')} AS pg_catalog.text)", f"CAST({ph('payload')} AS pg_catalog.jsonb)"
    key = f"CAST({ph('key')} AS pg_catalog.text)"
    options = _options("idempotency_key", "pg_catalog.text", ph)
    return (f"SELECT CASE WHEN {key} IS NULL THEN pglogq.send({queue}, {payload},{options})"
            f" ELSE pglogq.send_keyed({queue}, {payload}, {key},{options}) END")


def send_batch_sql(ph: Placeholder) -> str:
    """``pglogq.send_batch_keyed`` (its ``keys`` NULL for events without a key)."""
    return (f"SELECT pglogq.send_batch_keyed(CAST({ph('queue')} AS pg_catalog.text),"
            f" CAST({ph('payloads')} AS pg_catalog.jsonb), CAST({ph('keys')} AS pg_catalog.text[]),"
            f"{_options('idempotency_keys', 'pg_catalog.text[]', ph)})")


def _common(queue: Any, options: Mapping[str, Any], headers: Any) -> dict[str, Any]:
    queue_name = a.name(queue, "queue")  # checked first, as Client.send checks it
    type_, headers_jsonb, priority, deliver_at, delay = a.event_options(
        options.get("type"), headers, options.get("priority", 100), options.get("deliver_at"), options.get("delay"))
    return {
        "queue": queue_name,
        "type": type_,
        "headers": None if headers_jsonb is None else headers_jsonb.obj,  # the JSON text
        "priority": priority,
        "deliver_at": deliver_at,
        "delay": delay,
    }


def send_params(queue: Any, payload: Any, options: Mapping[str, Any], headers: Any) -> dict[str, Any]:
    """The parameters of :func:`send_sql`, checked as ``Client.send`` checks them: ``options``
    are ``send``'s (:class:`~pglogq.SendOptions`), ``headers`` the ones to store (tracing adds its
    context to the caller's)."""
    params = _common(queue, options, headers)
    params["payload"] = v.dumps(payload)
    params["idempotency_key"] = a.text(options.get("idempotency_key"), "idempotency key")
    key = options.get("key")
    params["key"] = None if key is None else check_key(key)
    return params


def send_batch_params(
    queue: Any, payloads: list[Any], options: Mapping[str, Any], headers: Any
) -> dict[str, Any]:
    """The parameters of :func:`send_batch_sql`, checked as ``Client.send_batch`` checks them
    (``options``: :class:`~pglogq.SendBatchOptions`)."""
    idem = a.idempotency_keys(options.get("idempotency_keys"))
    params = _common(queue, options, headers)
    keys = options.get("keys")
    params["keys"] = None if keys is None else check_keys(keys, len(payloads))
    params["payloads"] = v.dumps(payloads)
    params["idempotency_keys"] = idem
    return params


known_options = a.known_options
"""TypeError for a keyword that ``send`` / ``send_batch`` do not take (see :mod:`pglogq._args`)."""
SEND_OPTIONS, SEND_BATCH_OPTIONS = a.SEND_OPTIONS, a.SEND_BATCH_OPTIONS


def ids(value: Any) -> list[int]:
    return [int(i) for i in value or []]


sending = _trace.sending
"""The tracing hook of ``send`` (a no-op unless :func:`pglogq.contrib.otel.instrument` ran)."""


def payload_list(payloads: Sequence[Any]) -> list[Any]:
    return a.payload_list(payloads)


# -- errors ---------------------------------------------------------------------------------


def _sqlstate(exc: BaseException) -> tuple[str, BaseException] | None:
    """The SQLSTATE of a driver error wrapped by a framework (Django chains it as the cause,
    SQLAlchemy keeps it as ``orig``): psycopg and asyncpg call it ``sqlstate``, psycopg2 ``pgcode``."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        for attr in ("sqlstate", "pgcode"):
            code = getattr(e, attr, None)
            if isinstance(code, str) and len(code) == 5:
                return code, e
        orig = getattr(e, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, e.__cause__]
    return None


def _message(e: BaseException) -> tuple[str, str | None]:
    diag = getattr(e, "diag", None)  # psycopg, psycopg2
    if diag is not None and getattr(diag, "message_primary", None):
        return str(diag.message_primary), getattr(diag, "message_hint", None)
    message = getattr(e, "message", None)  # asyncpg
    if isinstance(message, str) and message:
        hint = getattr(e, "hint", None)
        return message, hint if isinstance(hint, str) else None
    return str(e).split("\n")[0], None


def translate(exc: BaseException) -> BaseException:
    """The pglogq exception for a framework's database error raised by a pglogq function (found by
    its SQLSTATE), else ``exc`` itself."""
    found = _sqlstate(exc)
    if found is None:
        return exc
    cls = BY_SQLSTATE.get(found[0])
    if cls is None:
        return exc
    message, hint = _message(found[1])
    return cls(message, hint=hint)


@contextmanager
def translating(errors: type[BaseException] | tuple[type[BaseException], ...]) -> Iterator[None]:
    """Raise the pglogq exception of a framework error of class ``errors`` (chained to it)."""
    try:
        yield
    except errors as exc:
        err = translate(exc)
        if err is exc:
            raise
        raise err from exc
