"""pglogq in a Django project (the ``django`` extra): events in Django's own transaction.

Add ``"pglogq.contrib.django"`` to ``INSTALLED_APPS`` for the management commands
``pglogq_worker`` and ``pglogq_ticker``.  Settings (all optional)::

    PGLOGQ = {
        "DATABASE": "default",   # the Django database alias that holds pglogq
        "DSN": None,             # the worker's and ticker's DSN; default: built from that database
    }

:func:`send` and :func:`send_batch` run ``pglogq.send`` / ``pglogq.send_batch_json`` through
Django's connection of that alias, with bound parameters: inside ``transaction.atomic()`` the
event commits with the rest of the block or not at all; outside one (autocommit) it commits at
once.  Any driver of Django's PostgreSQL backend works (psycopg 3, or psycopg2 with Django
releases that use it).  The worker and the ticker use their own connections (the DSN).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from typing_extensions import Unpack

import pglogq
from pglogq._args import SendBatchOptions, SendOptions
from pglogq.contrib import _sqlapi

__all__ = ["client", "dsn", "send", "send_batch"]

_KEYS = {"DATABASE", "DSN"}
_LIBPQ = frozenset(d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults())


def _conf() -> dict[str, Any]:
    conf = getattr(settings, "PGLOGQ", None) or {}
    if not isinstance(conf, dict):
        raise ImproperlyConfigured(f"settings.PGLOGQ must be a dict, got {type(conf).__name__}")
    unknown = set(conf) - _KEYS
    if unknown:
        raise ImproperlyConfigured(f"unknown key(s) in settings.PGLOGQ: {', '.join(sorted(unknown))} "
                                   f"(known: {', '.join(sorted(_KEYS))})")
    return conf


def _alias(using: str | None) -> str:
    alias = using or _conf().get("DATABASE") or DEFAULT_DB_ALIAS
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(f"pglogq: no database {alias!r} in settings.DATABASES")
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        raise ImproperlyConfigured(f"pglogq: database {alias!r} is {vendor}, pglogq needs PostgreSQL")
    return str(alias)


def dsn(using: str | None = None) -> str:
    """The DSN of the worker and the ticker: ``PGLOGQ["DSN"]``, else the libpq parameters of
    the Django database (NAME, USER, PASSWORD, HOST, PORT and the libpq keys of OPTIONS)."""
    conf = _conf()
    if conf.get("DSN") and using is None:
        return str(conf["DSN"])
    db = settings.DATABASES[_alias(using)]
    params: dict[str, Any] = {
        "dbname": db.get("NAME"), "user": db.get("USER"), "password": db.get("PASSWORD"),
        "host": db.get("HOST"), "port": db.get("PORT"),
    }
    for key, value in (db.get("OPTIONS") or {}).items():
        if key in _LIBPQ and isinstance(value, (str, int)) and not isinstance(value, bool):
            params[key] = value
    return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v not in (None, "")})


_client: pglogq.Client | None = None
_client_lock = threading.Lock()


def client() -> pglogq.Client:
    """A :class:`pglogq.Client` on :func:`dsn`, made once per process (for administration:
    ``create_queue``, ``subscribe``, ``receive``...; sending in a transaction is :func:`send`)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = pglogq.Client(dsn())
        return _client


def _scalar(alias: str, sql: str, params: dict[str, Any]) -> Any:
    with _sqlapi.translating(DatabaseError), connections[alias].cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return row[0] if row else None


_SEND = _sqlapi.send_sql(_sqlapi.pyformat)
_SEND_BATCH = _sqlapi.send_batch_sql(_sqlapi.pyformat)


def send(
    queue: str,
    payload: Any,
    *,
    using: str | None = None,
    **options: Unpack[SendOptions],
) -> int:
    """Append one event in the current transaction of Django's connection ``using`` (default:
    ``PGLOGQ["DATABASE"]``, else ``"default"``); returns its message id.  Same arguments and
    errors as :meth:`pglogq.Client.send`."""
    _sqlapi.known_options("send", options, _sqlapi.SEND_OPTIONS)
    alias = _alias(using)
    with _sqlapi.sending(queue, options.get("headers")) as span:
        params = _sqlapi.send_params(queue, payload, options, span.headers)
        msg_id = int(_scalar(alias, _SEND, params))
        span.sent((msg_id,))
        return msg_id


def send_batch(
    queue: str,
    payloads: Sequence[Any],
    *,
    using: str | None = None,
    **options: Unpack[SendBatchOptions],
) -> list[int]:
    """Append many events in one statement, in the current transaction of Django's connection;
    returns their ids in order.  Same arguments and errors as :meth:`pglogq.Client.send_batch`."""
    _sqlapi.known_options("send_batch", options, _sqlapi.SEND_BATCH_OPTIONS)
    alias = _alias(using)
    events = _sqlapi.payload_list(payloads)
    with _sqlapi.sending(queue, options.get("headers"), len(events)) as span:
        params = _sqlapi.send_batch_params(queue, events, options, span.headers)
        ids = _sqlapi.ids(_scalar(alias, _SEND_BATCH, params))
        span.sent(ids)
        return ids
