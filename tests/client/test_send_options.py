"""One type for send's options: :class:`pglogq.SendOptions` and :class:`pglogq.SendBatchOptions`
name exactly the keyword arguments of ``Client.send`` / ``send_batch`` (besides ``conn``), and
every function that passes them on (the sharded clients, the Django and SQLAlchemy integrations)
takes these names and refuses any other with Python's own TypeError, before any SQL.

No database here: what is checked happens before a connection is used (the sharded clients'
routing and the integrations' statements are tested against real servers in
tests/client/test_sharded.py and tests/integrations/)."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

import pglogq
from pglogq.contrib import django as pglogq_django
from pglogq.contrib import sqlalchemy as pglogq_sqlalchemy


def keyword_options(function: Callable[..., Any]) -> set[str]:
    """The keyword-only parameters of ``function`` besides ``conn``."""
    return {p.name for p in inspect.signature(function).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name != "conn"}


@pytest.mark.parametrize("cls", [pglogq.Client, pglogq.AsyncClient])
def test_the_option_types_name_the_clients_keyword_arguments(cls: type) -> None:
    assert keyword_options(cls.send) == set(pglogq.SendOptions.__annotations__) | set(
        pglogq.EventOptions.__annotations__)
    assert keyword_options(cls.send_batch) == set(pglogq.SendBatchOptions.__annotations__) | set(
        pglogq.EventOptions.__annotations__)


def test_the_client_defaults_are_the_documented_ones() -> None:
    """EventOptions says the defaults are send's: None for all but priority, 100."""
    for method in (pglogq.Client.send, pglogq.Client.send_batch):
        defaults = {p.name: p.default for p in inspect.signature(method).parameters.values()
                    if p.kind is p.KEYWORD_ONLY and p.name != "conn"}
        assert defaults.pop("priority") == 100
        assert set(defaults.values()) == {None}


PASSERS_ON: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
    ("ShardedClient.send", pglogq.ShardedClient.send, (object(), "q", {})),
    ("ShardedClient.send_batch", pglogq.ShardedClient.send_batch, (object(), "q", [{}])),
    ("AsyncShardedClient.send", pglogq.AsyncShardedClient.send, (object(), "q", {})),
    ("AsyncShardedClient.send_batch", pglogq.AsyncShardedClient.send_batch, (object(), "q", [{}])),
    ("django.send", pglogq_django.send, ("q", {})),
    ("django.send_batch", pglogq_django.send_batch, ("q", [{}])),
    ("sqlalchemy.send", pglogq_sqlalchemy.send, (object(), "q", {})),
    ("sqlalchemy.send_batch", pglogq_sqlalchemy.send_batch, (object(), "q", [{}])),
    ("sqlalchemy.send_async", pglogq_sqlalchemy.send_async, (object(), "q", {})),
    ("sqlalchemy.send_batch_async", pglogq_sqlalchemy.send_batch_async, (object(), "q", [{}])),
]


@pytest.mark.parametrize(("label", "function", "args"), PASSERS_ON, ids=[p[0] for p in PASSERS_ON])
def test_a_misspelt_option_is_python_s_type_error_before_anything_runs(
    label: str, function: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    """The message Python gives for a function with named keyword arguments (the one these
    functions gave when each listed the options itself)."""
    # the first positional argument of a method or an integration is an object that would fail
    # at its first use: the TypeError comes before any use of it
    expected = rf"^{re.escape(function.__qualname__)}\(\) got an unexpected keyword argument 'prority'$"
    with pytest.raises(TypeError, match=expected):
        if inspect.iscoroutinefunction(function):
            asyncio.run(function(*args, prority=5))
        else:
            function(*args, prority=5)


def test_the_options_are_passed_on_by_name() -> None:
    """The integrations name the options as Client.send does: a wrong value of each is refused
    with the client's error (checked before any SQL, so no database is needed)."""
    from pglogq.contrib import _sqlapi

    bad: dict[str, tuple[Any, type[Exception]]] = {
        "type": (5, pglogq.InvalidPayload),
        "headers": ({"x": float("nan")}, pglogq.InvalidPayload),
        "priority": (2**40, pglogq.InvalidArgument),
        "deliver_at": ("tomorrow", pglogq.InvalidDelay),
        "delay": (5, pglogq.InvalidDelay),
        "idempotency_key": (b"k", pglogq.InvalidArgument),
        "key": ("", pglogq.InvalidKey),
    }
    for option, (value, error) in bad.items():
        options: dict[str, Any] = {option: value}
        with pytest.raises(error):
            _sqlapi.send_params("q", {}, options, options.get("headers"))
    with pytest.raises(pglogq.InvalidArgument, match="not a single str"):
        _sqlapi.send_batch_params("q", [{}], {"idempotency_keys": "abc"}, None)
