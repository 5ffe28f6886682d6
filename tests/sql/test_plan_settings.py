"""Planner settings of the functions: a function that prices a plan shape out must not pay JIT.

Several functions turn a planner method off (``SET enable_seqscan = off``, ``enable_sort = off``)
so that a plan made on missing statistics stays on its index.  PostgreSQL does that by adding
10^10 to the cost of every such path it keeps anyway (a scan of an empty side table has no other
path), and a plan that costly passes ``jit_above_cost`` (100,000): every call compiled its query
with LLVM, about half a second for a few index probes (``queue_info(q)`` took 470-680 ms at every
size of the growth benchmark).  The rule has one owner, this file: such a function sets
``jit = off`` too.
"""

from __future__ import annotations

import psycopg
import pytest

import pglogq


def _settings(conn: psycopg.Connection) -> list[tuple[str, list[str]]]:
    return [
        (r[0], list(r[1] or []))
        for r in conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p"
            " WHERE p.pronamespace = 'pglogq'::regnamespace ORDER BY 1"
        )
    ]


def test_a_function_that_turns_a_plan_method_off_turns_jit_off(client: pglogq.Client, dsn: str) -> None:
    # a queue of each kind, so that the per-queue copies of the read functions are swept too
    client.create_queue("plain")
    client.create_queue("parts", partitions=4)
    client.subscribe("parts", "c")
    client.send("parts", {"n": 1}, key="k")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.force_tick('parts')")
        conn.execute("SELECT * FROM pglogq.receive('parts', 'c')")
        rows = _settings(conn)
    penalised = [(sig, cfg) for sig, cfg in rows if any(c.startswith("enable_") and c.endswith("=off") for c in cfg)]
    assert len(penalised) >= 8, penalised  # _batch_page, _tick, receive, queue_info, ... and their copies
    missing = [sig for sig, cfg in penalised if "jit=off" not in cfg]
    assert missing == [], missing


@pytest.mark.parametrize("call", ["SELECT * FROM pglogq.queue_info('q')", "SELECT * FROM pglogq.queue_info()"])
def test_the_listings_compile_nothing(client: pglogq.Client, dsn: str, call: str) -> None:
    """Seen from the plans themselves: auto_explain logs every statement run inside the call
    with its plan, and none of them carries a JIT section (the server compiles with LLVM here,
    else the test is skipped: then it could not fail)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"n": 1})
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute("SELECT pg_jit_available()").fetchone()[0]:  # type: ignore[index]
            pytest.skip("this server has no JIT provider")
        plans: list[str] = []
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET client_min_messages = log")
        conn.execute(call).fetchall()
    nested = [p for p in plans if "pglogq" in p or "tick" in p]
    assert nested, plans  # the statements inside the function were seen
    assert [p for p in plans if "JIT:" in p] == []
