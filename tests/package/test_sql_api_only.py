"""The command line and the ticker daemon use the SQL API only (so that the SQL API is complete and
the tables can change under it): no statement of theirs names a pglogq table; they call pglogq's
functions and read its views.  A missing piece of the API is added as a function (sql/functions/),
never worked around with a table read in Python."""

from __future__ import annotations

import ast
import re

from pglogq import schema
from tests.support.paths import REPO

SCANNED = [*sorted((REPO / "pglogq" / "cli").rglob("*.py")), *sorted((REPO / "pglogq" / "tickerd").rglob("*.py")),
           *sorted((REPO / "pglogq" / "dashboard").rglob("*.py")),
           REPO / "pglogq" / "cluster" / "cluster_admin.py"]  # the orchestrator of `pglogq cluster`


def tables() -> set[str]:
    """Every table the migrations create (the event table's children are named event_*)."""
    out = set()
    for m in schema.migrations():
        out |= set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?pglogq\.(\w+)", m.sql, re.I))
    return out


def views() -> set[str]:
    return set(re.findall(r"CREATE (?:OR REPLACE )?VIEW pglogq\.(\w+)", schema.views_sql(), re.I))


def _strings(tree: ast.AST) -> list[str]:
    """String constants of a module, without docstrings (prose may name a table)."""
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def violations(source: str, known_tables: set[str], known_views: set[str]) -> list[str]:
    """Each pglogq table a module's SQL names, and each relation it reads that is not a view."""
    out = []
    for text in _strings(ast.parse(source)):
        for name in re.findall(r"pglogq\.(\w+)\b(?!\s*\()", text):
            if name in known_tables or name.startswith("event_"):
                out.append(f"table pglogq.{name}")
        for name in re.findall(r"\b(?:FROM|JOIN|UPDATE|INTO|TABLE)\s+pglogq\.(\w+)\b(?!\s*\()", text, re.I):
            if name not in known_views and name not in known_tables:
                out.append(f"relation pglogq.{name} (not a view)")
    return out


def test_the_scan_finds_a_table_read() -> None:
    """The check itself: the table reads the CLI had before are found."""
    old = 'Q = """SELECT count(*) FROM pglogq.dead_letter d JOIN pglogq.queue q ON q.queue_id = d.queue_id"""\n'
    assert violations(old, tables(), views()) == ["table pglogq.dead_letter", "table pglogq.queue"]
    assert violations('Q = "SELECT * FROM pglogq.in_flight"\n', tables(), views()) == []
    assert violations('Q = "SELECT * FROM pglogq.queue_info(NULL)"\n', tables(), views()) == []
    assert violations('"""A docstring may name pglogq.queue."""\n', tables(), views()) == []


def test_cli_and_ticker_daemon_name_no_pglogq_table() -> None:
    assert {p.parent.name for p in SCANNED} >= {"cli", "tickerd", "dashboard"}, "the scan must see every package"
    known_tables, known_views = tables(), views()
    assert {"queue", "event", "dead_letter", "subscription", "ticker_state"} <= known_tables
    assert "in_flight" in known_views
    assert len(SCANNED) > 10
    found = {}
    for path in SCANNED:
        bad = violations(path.read_text(encoding="utf-8"), known_tables, known_views)
        if bad:
            found[str(path.relative_to(REPO))] = bad
    assert found == {}, f"direct table access outside the SQL API (add a function instead): {found}"
