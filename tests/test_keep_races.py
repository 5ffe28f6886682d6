"""Maintenance (prune, rotation, retention) racing cursor moves: nothing a cursor points to is
deleted, and rotation refuses when a position cannot be resolved (issue 21 #1, issue 12 #17)."""

from __future__ import annotations

import psycopg

import pglogq


def drain(client: pglogq.Client, consumer: str) -> list[int]:
    got: list[int] = []
    while batch := client.receive("q", consumer, max_messages=1000):
        got += [m.msg_id for m in batch]
        batch.ack()
    return got


def eight_ticks(client: pglogq.Client) -> list[int]:
    """Queue q, consumers a and b; 8 x (send, tick); both have read everything."""
    client.create_queue("q")
    client.subscribe("q", "a")
    client.subscribe("q", "b")
    sent = []
    for i in range(8):
        sent.append(client.send("q", {"n": i}))
        client.tick("q", force=True)
    assert drain(client, "a") == sent
    assert drain(client, "b") == sent
    return sent


def test_prune_never_deletes_the_tick_a_concurrent_seek_moves_to(client: pglogq.Client, dsn: str) -> None:
    """issue 21 #1: session 1 seeks a to tick 7 in an open transaction; session 2 prunes; then
    session 1 commits.  a must receive from tick 7 on, and rotation must not truncate what it
    has not received."""
    sent = eight_ticks(client)
    with psycopg.connect(dsn) as s1, psycopg.connect(dsn, autocommit=True) as s2:
        s1.execute("SELECT * FROM pglogq.seek('q', 'a', '7')")
        s2.execute("SELECT pglogq.maint_prune('q')")
        s1.commit()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT 1 FROM pglogq.tick WHERE tick_id = 7").fetchone() is not None
    later = [client.send("q", {"after": i}) for i in range(3)]
    client.tick("q", force=True)
    assert drain(client, "b") == later
    for _ in range(3):
        client.rotate("q", force=True)
        client.tick("q", force=True)
        drain(client, "b")
        client.maintain()
    assert drain(client, "a") == sent[-2:] + later  # ticks 8 and 9, then the new ones


def test_rotation_refuses_when_a_cursor_is_on_a_missing_tick(client: pglogq.Client, dsn: str) -> None:
    """issue 21 #1: a consumer whose tick has no row must block rotation, not pass its checks."""
    sent = eight_ticks(client)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pglogq.subscription SET last_tick = 5 WHERE consumer_name = 'a'")
        conn.execute("DELETE FROM pglogq.tick WHERE tick_id = 5")
    for _ in range(4):
        assert not client.rotate("q", force=True)
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        assert row is not None and row[0] == len(sent)


def test_rotation_refuses_when_an_open_batch_tick_is_missing(client: pglogq.Client, dsn: str) -> None:
    """issue 21 #1: the same for the ticks of an open batch (prev and cur)."""
    client.create_queue("q")
    client.subscribe("q", "a")
    client.tick("q", force=True)
    assert drain(client, "a") == []  # a passes the queue's creation: rotation would be allowed
    for i in range(3):
        client.send("q", {"n": i})
        client.tick("q", force=True)
    page = client.receive("q", "a", max_messages=1)
    assert len(page) == 1
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT batch_cur_tick FROM pglogq.subscription WHERE consumer_name = 'a'").fetchone()
        assert row is not None
        conn.execute("DELETE FROM pglogq.tick WHERE tick_id = %s", (row[0],))
    for _ in range(4):
        assert not client.rotate("q", force=True)
