"""The guarantee pages (docs/concepts) name the test proving each sentence: those tests exist,
and the sentences that had no test have one here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import psycopg

import pglogq
from tests.support.paths import REPO

PAGES = sorted((REPO / "docs" / "concepts").glob("*.md"))
REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_test_a_guarantee_page_names_exists() -> None:
    refs = [(page.name, f, name) for page in PAGES for f, name in REF.findall(page.read_text(encoding="utf-8"))]
    assert len(refs) >= 30
    missing = [r for r in refs if not (REPO / r[1]).is_file() or r[2] not in _test_names(REPO / r[1])]
    assert missing == []


def test_guarantee_pages_have_a_proof_table() -> None:
    for name in ("delivery-guarantees.md", "rotation.md", "long-transactions.md"):
        text = (REPO / "docs" / "concepts" / name).read_text(encoding="utf-8")
        assert "## Which test proves each sentence" in text, name


def test_a_rolled_back_send_leaves_one_dead_tuple_until_truncate(client: pglogq.Client, dsn: str) -> None:
    """rotation.md: no event row is ever updated or deleted, but a rolled-back send leaves its row
    behind in the event table (dead: never visible, still on disk) until that table's TRUNCATE."""
    client.create_queue("q")
    client.subscribe("q", "c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        qid, cur = conn.execute("SELECT queue_id, cur_table FROM pglogq.queue WHERE queue_name = 'q'").fetchone()  # type: ignore[misc]
        table = f"pglogq.event_{qid}_{cur}"
        assert conn.execute(f"SELECT pg_relation_size('{table}')".encode()).fetchone() == (0,)
        with psycopg.connect(dsn) as producer:
            client.send("q", {"rolled": "back"}, conn=producer)
            producer.rollback()
        # the aborted row occupies the table (a page) though no one can ever see it
        assert conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone() == (0,)
        assert conn.execute(f"SELECT pg_relation_size('{table}')".encode()).fetchone() != (0,)
        # rotation brings the table round again: it is truncated before it becomes current
        for _ in range(8):
            for _tick in range(2):  # the cursor must pass a tick taken after the last switch
                client.send("q", {"n": 1})
                client.tick("q", force=True)
                while b := client.receive("q", "c"):
                    b.ack()
            client.rotate("q")
            if conn.execute(f"SELECT pg_relation_size('{table}')".encode()).fetchone() == (0,):
                break
        assert conn.execute(f"SELECT pg_relation_size('{table}')".encode()).fetchone() == (0,)
