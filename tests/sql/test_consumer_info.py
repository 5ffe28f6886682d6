"""consumer_info's contract for names: NULL means all, a name that does not exist is an error
(PQ001 for a queue, PQ002 for a consumer), never an empty answer that reads as "no lag"."""

from __future__ import annotations

import psycopg
import pytest

import pglogq


def test_unknown_names_are_errors_and_null_means_all(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.create_queue("r")
    client.subscribe("q", "a")
    client.subscribe("q", "b")
    client.subscribe("r", "a")
    with psycopg.connect(dsn, autocommit=True) as conn:
        def names(*args: str | None) -> list[tuple[str, str]]:
            return [tuple(r) for r in conn.execute(
                "SELECT queue_name, consumer_name FROM pglogq.consumer_info(%s, %s)", args).fetchall()]

        assert names(None, None) == [("q", "a"), ("q", "b"), ("r", "a")]
        assert names("q", None) == [("q", "a"), ("q", "b")]
        assert names(None, "a") == [("q", "a"), ("r", "a")]
        assert names("r", "a") == [("r", "a")]
        for args, state, hint in [
            (("nope", None), "PQ001", None),
            (("Q", "a"), "PQ001", 'did you mean "q"?'),
            (("q", "ghost"), "PQ002", None),
            (("r", "b"), "PQ002", None),            # b exists, on another queue only
            ((None, "ghost"), "PQ002", "pglogq.consumer_info() lists the consumers"),
        ]:
            with pytest.raises(psycopg.Error) as e:
                names(*args)
            assert e.value.sqlstate == state, args
            if hint is not None:
                assert e.value.diag.message_hint == hint, args
    # the client raises the matching exceptions
    with pytest.raises(pglogq.errors.UnknownQueue):
        client.consumer_info("nope")
    with pytest.raises(pglogq.errors.UnknownConsumer):
        client.consumer_info("q", "ghost")
    with pytest.raises(pglogq.errors.UnknownConsumer):
        client.consumer_info(None, "ghost")
    # a queue without consumers is known: no rows, no error
    client.create_queue("empty")
    assert client.consumer_info("empty") == []
