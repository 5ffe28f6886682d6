"""docs/concepts/who-changes-what.md names every SQL function that writes a pglogq table, and
only functions that exist.

The page is the map a reader uses to find the one owner of a state change; a writer missing
from it is a state change nobody can find, and a name that no longer exists sends the reader
to nothing.  The writers are found in the function files themselves: every INSERT, UPDATE,
DELETE or TRUNCATE of a ``pglogq.`` table, written out or built for EXECUTE."""

from __future__ import annotations

import re

from tests.support.paths import REPO

FUNCTIONS = REPO / "sql" / "functions"
PAGE = REPO / "docs" / "concepts" / "who-changes-what.md"

# a statement that writes a table of the pglogq schema (also inside an EXECUTE string:
# 'UPDATE pglogq.%I ...', 'TRUNCATE ' || tab, where tab is one of pglogq's tables)
_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(?:ONLY\s+)?pglogq\.([a-z_%I]+)"
    r"|\bTRUNCATE\b(?:\s+TABLE)?\s*(?:pglogq\.([a-z_%I]+)|'\s*\|\|\s*(\w+))",
    re.IGNORECASE,
)


def _body(text: str) -> str:
    """A function file without its comments (the header names tables it only reads)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def writers() -> dict[str, set[str]]:
    """Each function that writes a pglogq table, with the tables it writes."""
    out: dict[str, set[str]] = {}
    for path in sorted(FUNCTIONS.glob("*.sql")):
        tables = set()
        for m in _WRITE.finditer(_body(path.read_text())):
            tables.add(next(g for g in m.groups() if g))
        if tables:
            out[path.stem] = tables
    return out


def _table_rows() -> list[list[str]]:
    """The rows of the page's tables (state change | owner | called by), header rows left out."""
    rows = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[1] not in ("owner", "---"):
            rows.append(cells)
    return rows


def _code_names(cell: str) -> set[str]:
    """The function names a cell writes as code: `name` or `name(args)`."""
    return set(re.findall(r"`(_?[a-z][a-z0-9_]*)(?:\([^`]*\))?`", cell))


def test_the_parser_sees_the_writers_it_must() -> None:
    # a parser that found nothing would pass the tests below: it must see the writers of each kind
    w = writers()
    assert "sub_state" in w["_close_batch"]  # UPDATE
    assert "subscriber" in w["cede"]  # INSERT INTO
    assert "progress" in w["_stream_takeover"]  # DELETE FROM
    assert "%I" in w["maint_rotate_meta"]  # inside an EXECUTE string
    assert "tab" in w["maint_rotate_step1"]  # 'TRUNCATE ' || tab
    assert {"heartbeat", "receive", "ack"} <= set(w)
    assert not {"lookup", "jobs", "_batch_page", "_page_position"} & set(w)  # they read only
    rows = _table_rows()
    assert len(rows) > 50 and all(r[1] for r in rows)


def test_every_writing_function_owns_a_row_of_the_page() -> None:
    owners = set().union(*(_code_names(r[1]) for r in _table_rows()))
    missing = sorted(set(writers()) - owners)
    assert missing == [], f"functions that write pglogq tables, owner of no row of {PAGE.name}: {missing}"


def test_every_function_the_pages_tables_name_exists() -> None:
    functions = {p.stem for p in FUNCTIONS.glob("*.sql")}
    named = set().union(*(_code_names(r[1]) | _code_names(r[2]) for r in _table_rows()))
    unknown = sorted(named - functions)
    assert unknown == [], f"{PAGE.name} names, as owner or caller, functions that do not exist: {unknown}"
